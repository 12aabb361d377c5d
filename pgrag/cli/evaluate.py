"""``pgrag eval`` (methods compared on one corpus and question set) and
``pgrag export-trajectories`` (CIRAG's steps for distillation): the commands
over a question set, on pgrag.bench."""

from __future__ import annotations

from pathlib import Path

import click

from .. import methods as method_registry
from .common import (
    corpus_file_option,
    dsn_option,
    int_list,
    llm_options,
    llm_settings,
    method_list,
    open_database,
    questions_option,
)


@click.command("eval")
@corpus_file_option
@questions_option
@click.option("--methods", "method_names", default=",".join(method_registry.names(variants=False)), show_default=True,
              callback=method_list, help="Comma-separated methods to compare.")
@click.option("--k", "ks", default="2,5", show_default=True, callback=int_list,
              help="Comma-separated k for Recall@k (distinct documents).")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="Chunks each method returns per question (default 4 x the largest k).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report's aggregates here (JSON); its per-question rows go to "
                   "<stem>.questions.jsonl beside it.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Markdown table here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Recall@k bar chart (PNG) here.")
@click.option("--progress/--no-progress", default=True, help="Show progress bars.")
@click.option("--extract", type=click.Choice(["spacy", "llm"]), default=None,
              help="Also build triples and propositions with this extractor (once; reused).")
@click.option("--oracle", is_flag=True,
              help="Answer the LLM prompts with the oracle reader (pgrag.bench.oracle): an ideal reader of each "
                   "prompt that knows the question's gold evidence (needs 'evidences', or MuSiQue's "
                   "'question_decomposition', in the questions). "
                   "The figures are an upper bound under ideal reasoning.")
@click.option("--failures", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --oracle: write the loop methods' failed questions (trace, oracle calls, where the "
                   "evidence was lost) as JSONL here (default: next to --out, *.failures.jsonl).")
@click.option("--runtime-cache/--no-runtime-cache", "keep_cache", default=False, show_default=True,
              help="Keep the model runtime's vector cache on while the methods run; by default it is off, so "
                   "that a method asked a question after another pays for its own encoding in its latency.")
@click.option("--untitled", is_flag=True,
              help="Index the documents without their titles (a corpus of its own): the methods see only the "
                   "text, and recall still counts documents by the titles of their ids.")
@llm_options
@dsn_option
def eval_command(corpus_file: Path, questions_file: Path, method_names: list[str], ks: tuple[int, ...],
                 depth: int | None, limit: int | None, out: Path | None, markdown: Path | None,
                 plot: Path | None, progress: bool, extract: str | None, oracle: bool, failures: Path | None,
                 keep_cache: bool, untitled: bool, llm_base_url: str | None, llm_model: str | None,
                 dsn: str | None) -> None:
    """Compare methods on one corpus and question set: Recall@k, EM/F1, latency, tokens.

    The corpus is indexed once, under a name derived from the file's content, and
    reused by later runs. Example:

        pgrag eval --corpus-file ../shared/bench/2wiki/corpus.json
        --questions ../shared/bench/2wiki/questions.jsonl --methods dense,bm25,hybrid
        --out report.json --markdown report.md --plot report.png

    With --oracle the methods that take an LLM (t2rag, cirag, threadrag, tigrag-reader) get the oracle
    reader instead of an LLM:

        pgrag eval --corpus-file ../shared/bench/2wiki/corpus.json
        --questions ../shared/bench/2wiki/questions.jsonl --methods t2rag,cirag,threadrag --oracle --out r.json
    """
    from ..bench import evaluate
    from ..bench.report import markdown_report, plot_recall
    from ..bench.run import run_eval

    if oracle and (llm_base_url or llm_model or extract == "llm"):
        raise click.UsageError("--oracle is the LLM of the run: it does not combine with --llm, --llm-model "
                               "or --extract llm")
    if oracle and untitled:
        raise click.UsageError("--oracle reads the gold evidence by title: it does not combine with --untitled")
    if failures and not oracle:
        raise click.UsageError("--failures needs --oracle")
    failures = failures or (out.with_suffix(".failures.jsonl") if oracle and out else None)
    questions = evaluate.load_questions(questions_file)
    questions = questions[:limit] if limit else questions
    run = run_eval(open_database(dsn), corpus_file, questions_file, questions, method_names, ks=ks,
                   llm=llm_settings(llm_base_url, llm_model), depth=depth, extract=extract, oracle=oracle,
                   failures=failures, progress=progress, keep_cache=keep_cache, untitled=untitled)
    if run.oracle_errors:
        click.echo(f"oracle: {len(run.oracle_errors)} requests refused, e.g. {run.oracle_errors[0]}", err=True)
    text = markdown_report(run.data)
    click.echo(text)
    if out:
        evaluate.write_report(run.data, out)
    if markdown:
        markdown.write_text(text, encoding="utf-8")
    if plot:
        plot_recall(run.data, plot)


@click.command("export-trajectories")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@questions_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSONL file to write.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--rounds", type=click.IntRange(min=1), default=None, help="Maximum rounds L (default 4).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@llm_options
@dsn_option
def export_trajectories(corpus: str, questions_file: Path, out: Path, limit: int | None, rounds: int | None,
                        progress: bool, llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Run CIRAG with an LLM (the teacher) and write each integration step as a
    chat fine-tuning record: {"messages": [system, user, assistant], "meta": {...}}.

        pgrag export-trajectories --corpus 2wiki --questions questions.jsonl --out traj.jsonl
        --llm http://127.0.0.1:8080/v1 --llm-model qwen2.5-7b
    """
    from ..bench import evaluate
    from ..bench.trajectories import export_trajectories as export

    settings = llm_settings(llm_base_url, llm_model)
    if not settings.configured:
        raise click.ClickException("export-trajectories needs an LLM: pass --llm URL --llm-model NAME "
                                   "(or set PGRAG_LLM_BASE_URL and PGRAG_LLM_MODEL)")
    questions = evaluate.load_questions(questions_file)[:limit]
    kb = open_database(dsn).corpus(corpus, create=False)
    options = {"rounds": rounds} if rounds else {}
    report = export(kb, questions, kb.llm(settings), out, progress=progress, **options)
    click.echo(f"{report.steps} integration steps from {report.questions} questions written to {out} "
               f"({report.correct} answered correctly; {report.prompt_tokens} prompt + "
               f"{report.completion_tokens} completion tokens)")
