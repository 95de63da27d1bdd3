"""Schemathesis hooks of scripts/openapi-check.sh: the tiers' postcard bodies
(application/x-postcard) are opaque bytes to it, sent as application/octet-stream is."""

import schemathesis

schemathesis.serializer.alias("application/x-postcard", "application/octet-stream")
