"""The edge: the one home of the hot endpoints (the assignment endpoints, /id-link, /healthz).

Every request to their paths, valid or not, is answered here, in front of Django's
handler, and every other request goes to Django's handler untouched: through WSGI
(application.py) or, as the server runs it, ASGI (asgi.py, on the event loop with
pool.py), both around the same endpoints' steps (answer.py). What the edge
does instead of the framework, and why, is in each module; what it leaves out of
the full request cycle is listed in one place (middleware.py), which a test holds
against settings.MIDDLEWARE, so a middleware added there cannot be passed by
without a word.
"""
