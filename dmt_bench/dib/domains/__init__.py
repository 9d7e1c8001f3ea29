"""Built-in DIB domains, one module each, named after the domain in ``dmt_proxy.domains``."""
