"""The review console's assets: Jinja2 templates and a little CSS and JavaScript of our own.

Why server-rendered templates and no front-end library: every page is a read of the
review service that the server renders once (Jinja2 with autoescaping, so memory
text is always text), and the only interactivity is a handful of keys that post to
the JSON review API. That needs about a hundred lines of plain JavaScript, which
ship here as a file; no library, no build step, nothing fetched from a CDN, and a
strict Content-Security-Policy (``script-src 'self'``, no inline script) that a
library needing ``eval`` or inline handlers would weaken. The files are package
data, so the console works offline from an installed wheel.
"""
