"""Every language survives its filters: language id first, then each filter with its language's rules.

A generated corpus of good prose in nine languages (English, German, Portuguese, Spanish, Russian,
Japanese, Chinese, Korean, Arabic) in one source goes through the filter phase with all four of
datatrove's prose filters. The share of each language's documents kept is within a factor of 1.5 of
every other's, and the funnel counts each filter's removals per language.
"""

import json

import pytest
from datatrove.data import Document

from pipeline.config import load_pipeline_config
from pipeline.runner import Executors, filter_pipeline, funnel_steps
from pipeline.steps.filter.filtering import build_filter
from pipeline.steps.filter.language_rules import filter_options, fineweb2_rules, word_tokenizer
from pipeline.steps.funnel import merge_step, step_dir
from pipeline.steps.intermediate import read_jsonl_zst
from pipeline.work import WorkLayout
from testkit.multilingual_prose import LANGUAGES, multilingual_records

PER_LANGUAGE = 6
FILTERS = ["gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality"]


def run_filter_phase(tmp_path, records: list[dict], filters: list[str]) -> tuple[list[str], WorkLayout, list[str]]:
    """The filter phase alone (one task, in this process): the ids it kept, its work layout, its step names."""
    (tmp_path / "prose").mkdir()
    (tmp_path / "prose" / "all.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    (tmp_path / "p.toml").write_text(
        f'[[sources]]\nname = "prose"\npaths = ["prose"]\nformat = "jsonl"\nfilters = {json.dumps(filters)}\n'
        "[dedup]\nexact = false\nfuzzy = false\n[executor]\ntasks = 1\nworkers = 1\n"
    )
    config = load_pipeline_config(tmp_path / "p.toml")
    layout = WorkLayout(tmp_path / "work")
    Executors("local", 1).run("filter", filter_pipeline(config, layout), 1, layout.logs / "1-filter")
    kept = [record["id"] for path in sorted(layout.filtered.glob("*.jsonl.zst")) for record in read_jsonl_zst(path)]
    return kept, layout, funnel_steps(config)


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    records = [
        {"id": r["id"], "text": r["text"], "written_in": r["language"]} for r in multilingual_records(PER_LANGUAGE)
    ]
    return records, *run_filter_phase(tmp_path_factory.mktemp("languages"), records, FILTERS)


@pytest.mark.slow
def test_the_share_of_good_prose_kept_is_alike_across_languages(filtered):
    records, kept, _, _ = filtered
    kept_ids = set(kept)
    share = {
        language: sum(f"prose/{r['id']}" in kept_ids for r in records if r["written_in"] == language) / PER_LANGUAGE
        for language in LANGUAGES
    }
    assert min(share.values()) > 0, share
    assert max(share.values()) / min(share.values()) <= 1.5, share
    assert min(share.values()) >= 0.8, share  # good prose is kept, not only kept alike


@pytest.mark.slow
def test_the_funnel_counts_each_filters_removals_per_language(filtered):
    _, _, layout, names = filtered
    assert names.index("language") < min(names.index(f) for f in FILTERS)  # language id first
    identified = merge_step(step_dir(layout.funnel, names.index("language"), "language"), "languages")
    assert {lang: c.received.documents for lang, c in identified.items()} == dict.fromkeys(LANGUAGES, PER_LANGUAGE)
    for name in FILTERS:
        languages = merge_step(step_dir(layout.funnel, names.index(name), name), "languages")
        assert set(languages) == set(LANGUAGES)
        for counts in languages.values():
            assert counts.received.documents == counts.kept.documents + counts.removed_documents()


def test_chinese_japanese_korean_and_thai_words_come_from_their_segmenters():
    """FineWeb-2's segmenters (jieba, SudachiPy, Kiwi, PyThaiNLP through datatrove), not one word per character."""
    import jieba

    chinese = "我们今天在北京的大学里学习中文，这是一个很好的机会。"
    zh, kind = word_tokenizer("zh")
    assert kind == "datatrove"
    assert zh.word_tokenize(chinese) == [w for w in jieba.lcut(chinese) if w.strip()]
    assert len(zh.word_tokenize(chinese)) == 17  # 26 characters
    words = {
        language: word_tokenizer(language)[0].word_tokenize(text)
        for language, text in {
            "ja": "私は昨日東京の大学で日本語を勉強しました。",
            "ko": "저는 어제 서울에 있는 대학교에서 한국어를 공부했습니다.",
            "th": "ผมไปเรียนภาษาไทยที่มหาวิทยาลัยในกรุงเทพ",
        }.items()
    }
    assert {"東京", "大学", "勉強"} <= set(words["ja"]) and "東" not in words["ja"]
    assert {"대학교", "에서", "한국어", "를"} <= set(words["ko"])  # spaces alone give 대학교에서, 한국어를
    assert {"มหาวิทยาลัย", "กรุงเทพ"} <= set(words["th"])


def test_korean_documents_without_stop_words_are_removed_and_prose_is_kept():
    """FineWeb-2's Korean stop words are Kiwi morphemes (의, 는, 를): with Kiwi's words the rule can run."""
    places = "서울 부산 대구 인천 광주 대전 울산 수원 창원 고양 용인 성남 청주 전주 천안 안산 김해 포항 제주 원주"
    foods = "김치 불고기 비빔밥 냉면 떡볶이 갈비 잡채 김밥 만두 라면 국수 순대 호떡 붕어빵 삼겹살 된장 고추장 두부"
    nouns = (
        places.split()
        + foods.split()
        + ["시금치", "미역", "멸치", "오징어", "새우", "굴비", "전복", "홍합", "조개", "낙지", "문어", "춘천"]
    )
    listing = "\n".join(" ".join(nouns[i : i + 10]) for i in range(0, len(nouns), 10))  # 50 nouns, no particle
    prose = next(r["text"] for r in multilingual_records(1) if r["language"] == "ko")
    options = filter_options("gopher_quality", "ko", {})
    assert len(options["stop_words"]) >= 20
    gopher = build_filter("gopher_quality", options)
    assert gopher.filter(Document(text=listing, id="listing")) == (False, "gopher_enough_stop_words")
    assert gopher.filter(Document(text=prose, id="prose")) is True


def test_segmented_languages_take_fineweb2_thresholds_as_published():
    """With FineWeb-2's own segmenters its n-gram thresholds apply unchanged (no restating for characters)."""
    for language in ("zh", "ja", "ko", "th"):
        options = filter_options("gopher_repetition", language, {})
        published = fineweb2_rules()[language]
        assert (options["top_n_grams"], options["dup_n_grams"]) == (published["top_n_grams"], published["dup_n_grams"])


def test_a_filter_process_splits_english_and_chinese_words_without_importing_torch_or_scikit_learn(tmp_path):
    """spaCy's thinc imports torch when installed, and the cell models need scikit-learn: seconds of CPU in every
    pipeline process. A process that sizes its sample and splits words imports neither, and splits as
    datatrove's own spaCy tokenizer does."""
    import subprocess
    import sys

    from datatrove.utils.word_tokenizers import SpaCyTokenizer

    (tmp_path / "prose").mkdir()
    config = tmp_path / "p.toml"
    config.write_text('[[sources]]\nname = "prose"\npaths = ["prose"]\n')
    text = {"en": "Mr. Smith's dog didn't bark at 3:00 p.m., did it?", "zh": "我们今天在北京的大学里学习中文。"}
    script = (
        "import json, sys\n"
        "from pipeline.config import load_pipeline_config\n"
        "from pipeline.steps.filter.language_rules import word_tokenizer\n"
        "from pipeline.steps.filter.sample import sample_budget\n"
        f"sample_budget(load_pipeline_config({str(config)!r}))\n"
        f"words = {{lang: word_tokenizer(lang)[0].word_tokenize(t) for lang, t in {text!r}.items()}}\n"
        "print(json.dumps({'words': words, 'imported': sorted({'torch', 'sklearn', 'spacy'} & set(sys.modules))}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["imported"] == ["spacy"]
    assert seen["words"] == {language: SpaCyTokenizer(language).word_tokenize(t) for language, t in text.items()}
