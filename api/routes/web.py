"""The operator web page: static files shipped in the package, no build step.

The page and its assets are public; every datum it shows comes from `/api/*`,
which the API-key middleware guards as for any other client.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

from api.input_limits import StrictJSONRoute
from domain.errors import NotFound

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)

WEB_DIR = Path(__file__).resolve().parent.parent / "web"

# The page runs only its own script and style: no inline code, no third-party hosts.
_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # Revalidate on every load so an upgraded server never runs a stale script.
    "cache-control": "no-cache",
}

# The complete list of files served: a name is looked up here, never joined to a path.
_ASSETS = {
    "app.js": "text/javascript",
    "guide.js": "text/javascript",
    "policy.js": "text/javascript",
    "style.css": "text/css",
}


@router.get("/")
def page() -> FileResponse:
    """The operator page: task board, sessions, autonomy, audit."""
    return FileResponse(WEB_DIR / "index.html", media_type="text/html", headers=_HEADERS)


@router.get("/favicon.ico")
def favicon() -> Response:
    """No icon: browsers ask for one on every JSON or asset URL opened directly, and a
    404 there would show as an error in their console."""
    return Response(status_code=204, headers={"cache-control": "max-age=86400"})


@router.get("/web/{name}")
def asset(name: str) -> FileResponse:
    """The page's script and style sheet."""
    media = _ASSETS.get(name)
    if media is None:
        raise NotFound(f"No web asset {name!r}.")
    return FileResponse(WEB_DIR / name, media_type=media, headers=_HEADERS)
