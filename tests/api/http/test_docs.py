"""GET /docs works without internet access: the page and every asset it loads come from this
server."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def test_the_docs_page_loads_its_assets_from_this_server(client: TestClient) -> None:
    page = client.get("/docs")

    assert page.status_code == 200
    assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", page.text)
    assert assets, page.text
    for url in assets:
        assert url.startswith("/"), f"/docs loads {url} from elsewhere"
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.content, url
    assert any(url.endswith("swagger-ui-bundle.js") for url in assets)
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text


def test_redoc_is_off_rather_than_a_page_that_needs_a_cdn(client: TestClient) -> None:
    assert client.get("/redoc").status_code == 404
