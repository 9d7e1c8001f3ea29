"""Long-term memory: its types, backends, service and durable write path.

The backend protocol and ``Scope`` are plain types (``dmt_proxy.memory.base``); backends
are plugins, built by name (``await create_backend(name, BackendConfig(state_dir=...))``,
``dmt_proxy.memory.registry``), one module each in ``dmt_proxy.memory.backends``. The
service is ``dmt_proxy.memory.service``, put together in ``dmt_proxy.memory.assembly``;
the write path is ``dmt_proxy.memory.write``. Importing this package imports none of
them, so importing a plain type such as ``dmt_proxy.memory.base`` loads only plain types.
"""
