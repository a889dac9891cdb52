"""Funnel steps: HTML extraction, normalise, datatrove's heuristic filters (per source), language id.

Each is a datatrove `PipelineStep` that applies to the sources configured for it,
passes the others through untouched, counts what it received, kept and removed (with the
reason) per source into the funnel, and writes removed documents to
`removed/<stage>/<rank>.jsonl.zst` so that their tokens can be counted once the tokenizer
exists. The filters themselves are datatrove's own (`GopherQualityFilter`,
`GopherRepetitionFilter`, `C4QualityFilter`, `FineWebQualityFilter`), called through their
`filter()` method; language id is py3langid, whose model ships inside the package.
"""

from __future__ import annotations

import unicodedata
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from pipeline.filters import filter_spec
from pipeline.steps.filter.language_rules import filter_options
from pipeline.steps.funnel import StepCounts
from pipeline.steps.intermediate import AtomicJsonlZstWriter, task_file

if TYPE_CHECKING:
    from datatrove.pipeline.extractors.base import ExtractorSandbox
    from datatrove.pipeline.filters.base_filter import BaseFilter
    from py3langid.langid import LanguageIdentifier

EXTRACT_TIMEOUT = 5.0  # seconds per document (datatrove's default of 1 s times out on a loaded machine)
LANGID_CHARS = 2000  # py3langid reads this much of a document; enough to be sure, cheap on long ones


def build_filter(name: str, options: dict[str, Any]) -> Any:
    """The registered filter `name` (`pipeline.filters`), built with the config's keyword options (checked by
    its options model at config load)."""
    return filter_spec(name).filter_class()(**options)


def text_bytes(doc: Document) -> int:
    return len(doc.text.encode("utf-8", errors="surrogatepass"))


class CountedStep(PipelineStep):
    """A funnel step: `decide()` returns a removal reason, or None to keep (it may rewrite the text)."""

    type = "🔻 - STAGE"

    def __init__(self, funnel_step: str, funnel_dir: Path | str, removed_dir: Path | str, sources: list[str] | None):
        super().__init__()
        self.funnel_step = funnel_step
        self.funnel_dir = Path(funnel_dir)
        self.removed_dir = Path(removed_dir)
        self.sources = None if sources is None else frozenset(sources)

    def decide(self, doc: Document) -> str | None:
        raise NotImplementedError

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        counts = StepCounts()
        with AtomicJsonlZstWriter(task_file(self.removed_dir / self.funnel_step, rank)) as removed:
            for doc in data or ():
                source, text = doc.metadata["source"], doc.text
                size = received = text_bytes(doc)
                counts.received(source, size)
                reason = None
                if self.sources is None or source in self.sources:
                    with self.track_time():
                        reason = self.decide(doc)
                if doc.text is not text:  # rewritten by decide(): measure again (an unchanged text is the same object)
                    size = text_bytes(doc)
                counts.language(doc.metadata.get("language"), received, reason, size)
                if reason is None:
                    counts.kept(source, size)
                    self.stat_update("kept")
                    yield doc
                else:
                    counts.removed(source, reason, size)
                    self.stat_update(f"removed_{reason}")
                    removed.write({"id": doc.id, "source": source, "reason": reason, "text": doc.text})
        counts.save(self.funnel_dir / f"{rank:05d}.json")


class NormaliseStep(CountedStep):
    """Unicode repair with datatrove's FTFY formatter, then drop documents left empty."""

    name = "😎 normalise"

    def __init__(self, funnel_dir: Path | str, removed_dir: Path | str, sources: list[str] | None):
        super().__init__("normalise", funnel_dir, removed_dir, None)
        from datatrove.pipeline.formatters import FTFYFormatter  # lazy: heavy (datatrove)

        self.normalised = None if sources is None else frozenset(sources)
        self.formatter = FTFYFormatter()

    def decide(self, doc: Document) -> str | None:
        if self.normalised is None or doc.metadata["source"] in self.normalised:
            doc.text = self.formatter.format(doc.text)
        return "empty" if is_blank(doc.text) else None


def is_blank(text: str) -> bool:
    """Nothing but whitespace and invisible format characters (zero-width spaces and joiners, BOMs: category Cf)."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


class ExtractStep(CountedStep):
    """HTML to text with datatrove's `Trafilatura` extractor, in its sandbox (a per-document timeout).

    Applies to the sources whose format is HTML (warc, html); a document with no main text, or
    one whose extraction fails or times out, is removed with that reason. A page's text depends on that
    page alone: trafilatura's `deduplicate` (a process-wide cache of text segments seen, which would drop a
    segment from a page because earlier pages in the same process held it) is off, so the order of pages,
    the task count and a sandbox restarted after a timeout change nothing.
    """

    name = "⛏ extract"

    def __init__(
        self, funnel_dir: Path | str, removed_dir: Path | str, sources: list[str], timeout: float = EXTRACT_TIMEOUT
    ):
        super().__init__("extract", funnel_dir, removed_dir, sources)
        from datatrove.pipeline.extractors import Trafilatura  # lazy: heavy (datatrove)

        self.extractor = Trafilatura(timeout=timeout, deduplicate=False)
        self._sandbox: ExtractorSandbox | None = None

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        # lazy: here, so a forked sandbox starts warm (its start-up shares the timeout)
        import trafilatura  # noqa: F401
        from datatrove.pipeline.extractors.base import ExtractorSandbox  # lazy: heavy (datatrove)

        with ExtractorSandbox(timeout=self.extractor.timeout, warmup_text="") as sandbox:
            self._sandbox = sandbox
            yield from super().run(data, rank, world_size)

    def decide(self, doc: Document) -> str | None:
        if self._sandbox is None:
            raise RuntimeError("decide() outside run(): no extraction sandbox")
        try:
            text = self._sandbox.process_document(doc.text, self.extractor.extract)
        except TimeoutError:
            return "extraction_timeout"
        except EOFError:
            return "extraction_crashed"
        except Exception:  # trafilatura's own errors on broken HTML: the document is removed, counted
            return "extraction_error"
        if not text or is_blank(text):
            return "no_text"
        doc.text = text
        return None


class FilterStep(CountedStep):
    """A registered filter (`pipeline.filters`: datatrove's heuristic quality filters and others), applied to the
    sources that list it, with the rules of each document's language where it takes them
    (`pipeline.steps.filter.language_rules`; English where none was identified)."""

    def __init__(
        self,
        filter_name: str,
        options: dict[str, Any],
        funnel_dir: Path | str,
        removed_dir: Path | str,
        sources: list[str],
    ):
        self.name = f"🔻 {filter_name}"
        super().__init__(filter_name, funnel_dir, removed_dir, sources)
        self.filter_name, self.options = filter_name, options
        self._filters: dict[str | None, BaseFilter | None] = {}

    def filter_for(self, language: str | None) -> BaseFilter | None:
        """datatrove's filter with `language`'s rules (built once per language), or None where it does not apply."""
        if language not in self._filters:
            options = (
                filter_options(self.filter_name, language, self.options)
                if filter_spec(self.filter_name).language_rules
                else self.options
            )
            self._filters[language] = None if options is None else build_filter(self.filter_name, options)
        return self._filters[language]

    def decide(self, doc: Document) -> str | None:
        datatrove_filter = self.filter_for(doc.metadata.get("language"))
        if datatrove_filter is None:
            return None
        result = datatrove_filter.filter(doc)
        keep, reason = result if isinstance(result, tuple) else (result, None)
        return None if keep else (reason or "filtered")


@cache
def language_identifier() -> LanguageIdentifier:
    """py3langid's model, loaded once per process (about 1 s of CPU to decompress): every task that a
    process runs shares it."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # lazy: heavy (py3langid's model)

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


class LanguageStep(CountedStep):
    """py3langid language id; records `language` and `language_score`, drops by a per-source keep list."""

    name = "🌐 language"

    def __init__(self, funnel_dir: Path | str, removed_dir: Path | str, keep: dict[str, list[str] | None]):
        super().__init__("language", funnel_dir, removed_dir, list(keep))
        self.keep = {source: None if langs is None else frozenset(langs) for source, langs in keep.items()}

    def _classify(self, text: str) -> tuple[str, float]:
        language, score = language_identifier().classify(text[:LANGID_CHARS])
        return str(language), float(score)

    def decide(self, doc: Document) -> str | None:
        language, score = self._classify(doc.text)
        doc.metadata["language"] = language
        doc.metadata["language_score"] = round(score, 4)
        allowed = self.keep[doc.metadata["source"]]
        if allowed is not None and language not in allowed:
            return f"language_{language}"
        return None
