"""The job page's Search section, from a real search job's document (job_documents.py
"search"): the winner and why, the recipe that rebuilds it, one table row per candidate with
the reason each lost, and a scatter with one point per raced candidate; nothing of it on a job
that did not search."""

import json
import uuid

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.dashboard.html_tree import Element, parse
from tests.dashboard.job_documents import document, insert_job

TIMING_COLUMNS = slice(2, 6)  # p50, p99, throughput, speed-up: the td cells after the outcome


def page(site: TestClient, job_id: str) -> Element:
    response = site.get(f"/ui/jobs/{job_id}")
    assert response.status_code == 200, response.text[:500]
    return parse(response.text)


def cells(row: Element) -> list[str]:
    """A table row's cells as text, its header cell first."""
    return [cell.text.strip() for cell in row.children
            if isinstance(cell, Element) and cell.tag in ("th", "td")]


def test_search_job_shows_the_winner_its_recipe_and_one_row_per_candidate_with_its_reason(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    report = document("search")["search_report"]
    search = page(signed_in_site, insert_job(db_session, project, model_id, "search")
                  ).by_id("search")

    assert report["winner"] in search.by_id("search-winner").text
    assert search.by_id("search-why").text == report["why"]
    assert json.loads(search.by_id("search-recipe").text) == report["recipe"]
    table = search.by_id("search-table")
    assert [th.attrs.get("scope") for th in table.one("thead").find_all("th")] == ["col"] * 11
    rows = {row.attrs["data-candidate"]: row for row in table.one("tbody").find_all("tr")}
    assert list(rows) == [row["name"] for row in report["rows"]]
    for candidate in report["rows"]:
        row = rows[candidate["name"]]
        assert row.one("th").attrs["scope"] == "row"
        *_, pareto, reason = cells(row)
        assert pareto == ("yes" if candidate["pareto"] else "no")
        if candidate["outcome"] == "won":
            assert row.one("span", class_="best-tag").text == "won" and reason == "shipped"
        else:
            assert reason == candidate["reason"] and reason  # every loser says why
        timing = cells(row)[TIMING_COLUMNS]
        if "latency_ms_p50" in candidate:
            low, high = candidate["latency_ms_p50_ci"]
            assert timing[0].startswith(f"{candidate['latency_ms_p50']:.3g}")
            assert f"{low:.3g}–{high:.3g}" in timing[0]
        else:
            assert timing == ["–"] * 4
    assert cells(rows["int8-static"])[1] == "refused"


def test_search_chart_has_one_point_per_raced_candidate_with_the_pareto_ones_marked(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    report = document("search")["search_report"]
    raced = [row for row in report["rows"] if "latency_ms_p50" in row]
    search = page(signed_in_site, insert_job(db_session, project, model_id, "search")
                  ).by_id("search")

    chart = search.one("svg", class_="chart", data_chart="search-pareto")
    assert chart.attrs["role"] == "img" and chart.children[0].tag == "title"
    assert f"{len(raced)} candidates" in chart.attrs["aria-label"]
    points = chart.find_all(class_="point")
    assert len(raced) < len(report["rows"])  # the refused and the unraced draw no point
    assert sorted(p.attrs["data-name"] for p in points) == sorted(row["name"] for row in raced)
    assert {p.attrs["data-name"] for p in chart.find_all(class_="pareto")} == {
        row["name"] for row in raced if row["pareto"]}
    assert f"winner: {report['winner']}" in chart.text


def test_search_that_found_no_winner_says_so_and_draws_no_chart(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    report = document("search")["search_report"]
    report.update(winner=None, recipe=None, why="every candidate failed", race=None)
    report["rows"] = [{"name": row["name"], "outcome": "failed", "reason": "the build failed",
                       "pareto": False} for row in report["rows"]]
    search = page(signed_in_site, insert_job(db_session, project, model_id, "search",
                                             search_report=report)).by_id("search")

    assert "No candidate won" in search.by_id("search-winner").text
    assert not search.find_all("svg") and not search.find_all(id="search-recipe")
    rows = search.by_id("search-table").one("tbody").find_all("tr")
    assert [cells(row)[-1] for row in rows] == ["the build failed"] * len(report["rows"])


def test_job_without_a_search_report_shows_no_search_section(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = page(signed_in_site, insert_job(db_session, project, model_id,
                                           "onnxruntime_ablation"))

    assert not tree.find_all(id="search")
    assert not tree.find_all("svg", data_chart="search-pareto")
    tree.by_id("benchmarks")  # the page itself rendered


def test_a_throughput_searchs_row_says_how_many_requests_it_served_at_once(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    report = document("search")["search_report"]
    raced = [row for row in report["rows"] if "latency_ms_p50" in row]
    raced[0]["requests"] = 2
    search = page(signed_in_site, insert_job(db_session, project, model_id, "search",
                                             search_report=report)).by_id("search")

    rows = {row.attrs["data-candidate"]: row for row in
            search.by_id("search-table").one("tbody").find_all("tr")}
    throughput = cells(rows[raced[0]["name"]])[4]
    assert throughput.endswith("2 requests at once")
    assert all("at once" not in cells(rows[row["name"]])[4] for row in raced[1:])
