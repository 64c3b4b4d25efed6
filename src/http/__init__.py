"""The daemon's HTTP endpoint: the server and its bounds, access (Host check, bearer token, TLS),
the token file, the API's handlers and the status page. The only layer that knows status codes.

May import every layer below it. See docs/architecture.md.
"""
