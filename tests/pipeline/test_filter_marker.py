"""The toy marker filter removes exactly the planted documents and the funnel counts them under its name."""

import json

from datatrove.data import Document

from pipeline.stages.filter.filtering import FilterStep


def test_the_marker_filter_removes_the_planted_documents_and_counts_them(tmp_path):
    docs = [
        Document(text=f"document {i}" + (" XYZZY" if i % 3 == 0 else ""), id=str(i), metadata={"source": "web"})
        for i in range(9)
    ]
    step = FilterStep("marker", {}, tmp_path / "funnel", tmp_path / "removed", ["web"])
    kept = [doc.id for doc in step.run(iter(docs), rank=0)]
    assert kept == ["1", "2", "4", "5", "7", "8"]
    counts = json.loads((tmp_path / "funnel" / "00000.json").read_text())["sources"]["web"]
    assert counts["removed"]["marker"]["documents"] == 3
    assert counts["kept"]["documents"] == 6
