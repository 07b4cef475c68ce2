"""The web console: one HTML page and its static files, served by the plugin itself.

The page holds no data and needs no login; everything it shows comes from the API with the
same basic auth and tag rules as any client (the credentials stay in the tab's
sessionStorage). Vanilla JS and CSS under `static/`, installed as package data: no CDN and no
build step, so the console works on a broker without internet access.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).with_name("static")


async def index(request: Request) -> Response:
    # The page is small and changes with the package: let the browser revalidate it.
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def routes() -> list[Route | Mount]:
    """`/` (the page) and `/static/...` (its scripts and style sheet)."""
    return [
        Route("/", index, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
