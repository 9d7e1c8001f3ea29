"""Built-in DIB domains, one module each (discovered by ``registered_domains``)."""
