"""The page's routes: public static files with a strict content policy; the data stays keyed."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings


def test_page_and_assets_are_public_while_the_api_needs_the_key(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(api_key="k")), raise_server_exceptions=False) as c:
        page = c.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert '<script src="/web/app.js" defer></script>' in page.text
        assert '<script src="/web/guide.js" defer></script>' in page.text
        assert '<script src="/web/policy.js" defer></script>' in page.text
        for name, kind in (
            ("app.js", "text/javascript"),
            ("guide.js", "text/javascript"),
            ("policy.js", "text/javascript"),
            ("style.css", "text/css"),
        ):
            asset = c.get(f"/web/{name}")
            assert asset.status_code == 200
            assert asset.headers["content-type"].startswith(kind)
        # No icon, and no 404 for the browsers that ask for one.
        assert c.get("/favicon.ico").status_code == 204
        assert c.get("/api/tasks").status_code == 401
        assert c.get("/api/tasks", headers={"x-tachograph-key": "k"}).status_code == 200


def test_only_the_shipped_assets_are_served(settings: Settings) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for path in ("/web/index.html", "/web/..%2Fapp.py", "/web/../routes/web.py", "/web/x.js"):
            response = c.get(path)
            assert response.status_code == 404, path
            assert "text/javascript" not in response.headers.get("content-type", "")
        missing = c.get("/web/secrets.txt")
        assert missing.json()["error"] == "not_found"
