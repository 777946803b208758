"""`/docs` and `/redoc` work offline: every asset they load is served by the product."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def test_api_docs_load_nothing_from_another_host(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page)
        assert html.status_code == 200, page
        assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html.text)
        assets += re.findall(r"""url:\s*['"]([^'"]+)['"]""", html.text)
        assert assets, page
        for asset in assets:
            assert not re.match(r"^(https?:)?//", asset), (page, asset)
            loaded = client.get(asset)
            assert loaded.status_code == 200, (page, asset)
            assert loaded.content, (page, asset)
