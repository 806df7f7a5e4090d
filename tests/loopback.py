"""httpx's request functions for the tests' requests to their own servers, with one TLS
context made once.

``httpx.get()`` and the like build a client a call, and each client loads the CA bundle into
a new TLS context: ~48 ms of CPU a request (against ~2.5 ms with a context made once), even
for plain HTTP on loopback. The polling loops (a server's readiness, a collector's status)
made ten of them a second, half a core beside the process they waited for (issue 39, the
suite's time). The context is httpx's default one: HTTPS is verified as before.
"""

from __future__ import annotations

from functools import partial

import httpx

TLS = httpx.create_ssl_context()

get = partial(httpx.get, verify=TLS)
post = partial(httpx.post, verify=TLS)
put = partial(httpx.put, verify=TLS)
delete = partial(httpx.delete, verify=TLS)
head = partial(httpx.head, verify=TLS)
request = partial(httpx.request, verify=TLS)
