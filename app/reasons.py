"""Reasons the server's errors give (Pulsar's ``{"reason": ...}``) that clients match on.

Apart from `app.errors`, which needs FastAPI: ``rgadmin``'s HTTP commands read these where
only the client's dependencies are installed.
"""

from __future__ import annotations

#: A 404 for a missing group, as Pulsar words it: it tells a missing group apart from a
#: route the server lacks (an older server has no usage history).
RESOURCE_GROUP_MISSING = "ResourceGroup does not exist"
