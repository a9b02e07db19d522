#!/usr/bin/env python3
"""Goldens for `hopscore lepus` (tests/lepus_parity.rs): a Python re-implementation of
the PromptRank scoring and search (mukhal/PromptRank @26831e6, src/promptrank.py and
src/prompt_utils.py; SPEC §3) with HF transformers, on real HotpotQA questions.

Run by hand, never in CI (needs torch, transformers, tokenizers, scikit-learn, gguf):

    python3 tools/goldens/make_lepus_goldens.py [gpt2|gpt2_demos|t5_demos|smollm2]

Cases (small pools keep them cheap: the first POOL passages of each question):
- gpt2: a tiny random GPT-2 with a byte-level tokenizer (every byte one token, so
  documents really are cut at 230 tokens and long paths at 600), written to
  tests/fixtures/lepus/gpt2_bytes/ (config.json, model.safetensors, tokenizer.json);
  two templates (instruction after and before the documents), max ensemble, titles,
  T = 1.4.
- gpt2_demos: the same model with in-context demonstrations as the official run.py
  builds them (`--demos_file`, `--truncate_demos`): 4 demonstrations from the dev
  sample's questions 20-39 (comparison and bridge alternating, as run.py expects;
  written to tests/fixtures/lepus/demos.json in the official format), two sets (0,1)
  and (2,3) before hopscore's first template, their texts cut to 40 tokens, scores of
  the two sets averaged, prompts cut to 1000 tokens (`demo_max_prompt_len`).
- t5_demos: the random v1.1-layout T5 of tests/fixtures/t5/v1_1 (make_t5_goldens.py)
  scored as the official T5 branch does (the prompt is the encoder input, the question
  with `</s>` the labels, both cut to max_prompt_len with `</s>` kept), in float64;
  the demonstrations of gpt2_demos (cut to 30 tokens, `</s>` counted as the official
  `tokenizer.encode` counts it), two sets averaged, encoder inputs cut to 470 tokens.
- smollm2: SmolLM2-135M-Instruct (weights/smollm2/, tools/fetch_smollm2.sh), GGUF
  dequantised by transformers; the first template of hopscore's instruction set,
  mean ensemble, no titles, T = 1.

Writes tests/fixtures/lepus/<case>.json. Dataset text is never stored: per question
the id, per scored prompt the sha256 of the scored text (`prompt.strip() + " " +
question`) and its score, and the resulting ranking, document scores and paths.

The reference follows the official code: `create_prompt`, GPT-style scoring (mean
log-probability of the tokens after the prompt, logits / T, the joint text cut to
max_prompt_len tokens), `shorten_paragraph_if_necessary` (decode with transformers
4.x's space clean-up), TF-IDF pruning with `TfidfVectorizer(strip_accents="unicode",
stop_words="english")` fitted on the candidates, single-document ensemble as chosen
and the mean for paths, document score = max over single and paths, stable sorts.
Where the official code leaves an order unspecified (numpy argsort on ties) ties go
to the lower passage index. The joint tokenisation is checked against the separate
tokenisation of prompt and question that hopscore uses.
"""

import hashlib
import json
import sys

from common import FIXTURES, REPO_ROOT, hotpot_rows, offline, require_smollm2

offline()

import numpy as np  # noqa: E402
import torch  # noqa: E402

OUT = FIXTURES / "lepus"
N_QUESTIONS = 20
POOL = 6
K1, K2 = 2, 2


def data_rows():
    return hotpot_rows()[:N_QUESTIONS]


def instruction_templates(position, n):
    """hopscore's instruction file, as `parse_templates` reads it."""
    lines = (REPO_ROOT / "src" / "strategy" / "lepus_instructions.txt").read_text().splitlines()
    out = []
    for line in (l.strip() for l in lines):
        if not line or line.startswith("#"):
            continue
        if "<P>" in line:
            out.append(line)
        elif position == "after":
            out.append(f"Document: <P> {line} Question:")
        else:
            out.append(f"{line} Document: <P> Question:")
    return out[:n]


def render(template, docs):
    """The official create_prompt."""
    low = template.lower()
    prefix = "Document:" if "document:" in low else ("Passage:" if "passage:" in low else "")
    for p in [d for d in docs if d.strip() != ""]:
        template = template.replace("<P>", f"{p} {prefix} <P>")
    return template.replace(f"{prefix} <P>", "")


def clean_up_tokenization(text):
    """transformers 4.x `clean_up_tokenization`, which its `decode` applied by default
    (the official code ran 4.x; transformers 5 no longer applies it to BPE)."""
    for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]:
        text = text.replace(a, b)
    return text


def shorten(tok, text, max_doc, specials=False):
    """`specials`: count the tokens `tokenizer.encode` adds, as the official code's
    call does (T5's `</s>`; GPT-2 adds none)."""
    ids = tok.encode(text, add_special_tokens=specials)
    if len(ids) <= max_doc:
        return text
    par = clean_up_tokenization(tok.decode(ids[:max_doc], skip_special_tokens=True))
    return par if par.strip().endswith(".") else par + ". "


def tfidf_expansions(question, texts):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    out = []
    for d in range(len(texts)):
        cands = [j for j in range(len(texts)) if j != d and texts[j].strip()]
        vec = TfidfVectorizer(strip_accents="unicode", stop_words="english")
        try:
            feats = vec.fit_transform([texts[j] for j in cands])
        except ValueError:
            out.append([])
            continue
        cos = cosine_similarity(vec.transform([question]), feats).ravel()
        order = sorted(range(len(cands)), key=lambda i: -cos[i])
        out.append([cands[i] for i in order[:K2]])
    return out


class PromptTooLong(Exception):
    pass


class Scorer:
    def __init__(self, model, tok, add_bos, settings):
        self.model, self.tok, self.add_bos = model, tok, add_bos
        self.t = settings["temperature"]
        self.max_prompt = settings["max_prompt_tokens"]
        self.max_doc = settings["max_doc_tokens"]
        self.bos = [tok.bos_token_id] if add_bos else []
        self.cut = 0  # prompts whose question lost tokens to max_prompt_tokens
        self.specials = False  # whether shortening counts the tokenizer's special tokens

    def __call__(self, prompt, question):
        """Mean log-probability of the question tokens; the scored text."""
        text = prompt.strip() + " " + question
        joint = self.bos + self.tok.encode(text, add_special_tokens=False)
        head = self.bos + self.tok.encode(prompt.strip(), add_special_tokens=False)
        tail = self.tok.encode(" " + question, add_special_tokens=False)
        assert joint == head + tail, f"joint and separate tokenisation differ: {text!r}"
        ids = joint[: self.max_prompt]
        start = len(head)
        if start >= len(ids):
            raise PromptTooLong(f"the prompt is {start} tokens")
        self.cut += len(ids) < len(joint)
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = self.model(input_ids=x).logits.float()[0]
        logp = torch.log_softmax(logits[:-1] / self.t, dim=-1).gather(-1, x[0, 1:, None])[:, 0]
        return float(logp[start - 1 :].mean()), text


class T5Scorer(Scorer):
    """score_prompt_batch's T5 branch: the prompt (untrimmed) is the encoder input and
    the question the labels, each `tokenizer(text, max_length=max_prompt_len,
    truncation=True)` (so both end in `</s>`); the mean log-probability of the labels
    at T (`shift=False`)."""

    def __init__(self, model, tok, settings):
        super().__init__(model, tok, False, settings)
        self.specials = True

    def __call__(self, prompt, question):
        enc = self.tok(prompt, max_length=self.max_prompt, truncation=True)["input_ids"]
        labels = self.tok(question, max_length=self.max_prompt, truncation=True)["input_ids"]
        self.cut += len(self.tok(prompt)["input_ids"]) > len(enc)
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([enc]), labels=torch.tensor([labels])).logits[0]
        logp = torch.log_softmax(logits.double() / self.t, dim=-1).gather(-1, torch.tensor(labels)[:, None])
        return float(logp.mean()), prompt.strip() + " " + question


def search(scorer, templates, ensemble, title, row):
    """One question: prompts (hash, score) in hopscore's request order, and the result."""
    question = row["question"] if row["question"].endswith("?") else row["question"] + "?"
    pool = row["context"][:POOL]
    texts = ["".join(s) for _, s in pool]
    docs = []
    for (t, _), text in zip(pool, texts):
        if not text.strip():
            docs.append(None)
            continue
        body = shorten(scorer.tok, text, scorer.max_doc, scorer.specials)
        docs.append(f"Title: {t}. {body}" if title else body)
    prompts = []

    def score_paths(paths, how):
        out = []
        for path in paths:
            per = []
            for tpl in templates:
                s, text = scorer(render(tpl, [docs[j] for j in path]), question)
                prompts.append([hashlib.sha256(text.encode()).hexdigest(), s])
                per.append(s)
            out.append(float(np.mean(per)) if how == "mean" else max(per))
        return out

    cands = [j for j in range(len(docs)) if docs[j] is not None]
    single = dict(zip(cands, score_paths([[j] for j in cands], ensemble)))
    order = sorted(cands, key=lambda j: -single[j])
    expansions = tfidf_expansions(question, texts)
    paths = [[d1, d2] for d1 in order[:K1] for d2 in expansions[d1] if d2 != d1 and docs[d2] is not None]
    path_scores = score_paths(paths, "mean")
    final = dict(single)
    for path, s in zip(paths, path_scores):
        for d in path:
            final[d] = max(final[d], s)
    ranking = sorted(final, key=lambda j: -final[j])
    top = sorted(zip(paths, path_scores), key=lambda x: -x[1])
    return {
        "id": row["_id"],
        "prompts": prompts,
        "ranking": ranking,
        "doc_scores": [final[j] for j in ranking],
        "top_paths": [{"chain": p, "score": s} for p, s in top],
    }


def byte_level_tokenizer(path):
    """GPT-2's byte-level BPE with no merges: token id = byte value, plus <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    char = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}
    vocab = {char[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(path))


def gpt2_case():
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from make_decoder_goldens import randomize

    d = OUT / "gpt2_bytes"
    d.mkdir(parents=True, exist_ok=True)
    byte_level_tokenizer(d / "tokenizer.json")
    cfg = GPT2Config(vocab_size=257, n_positions=1024, n_embd=32, n_layer=2, n_head=4,
                     bos_token_id=256, eos_token_id=256)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    randomize(model, 7)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    (d / "generation_config.json").unlink(missing_ok=True)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))
    templates = instruction_templates("after", 1) + instruction_templates("before", 2)[1:]
    # Every byte is a token: shorter budgets than the defaults keep most paths within
    # the prompt budget, and still cut documents and some questions' tails.
    settings = {"templates": templates, "ensemble": "max", "title": True, "temperature": 1.4,
                "max_doc_tokens": 150, "max_prompt_tokens": 500}
    return settings, Scorer(model, tok, False, settings)


def demo_records(rows):
    """Two comparison and two bridge questions, alternating (run.py samples the even
    positions as comparison, the odd as bridge): question and gold path texts (each
    supporting title's paragraph, in the order the supporting facts name them)."""
    kinds = {"comparison": [], "bridge": []}
    for r in rows:
        kinds[r["type"]].append(r)
    out = []
    for comparison, bridge in zip(kinds["comparison"][:2], kinds["bridge"][:2]):
        for r in (comparison, bridge):
            paragraphs = {t: "".join(s) for t, s in r["context"]}
            titles = list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
            out.append({"question": r["question"], "gold_path_texts": [paragraphs[t] for t in titles]})
    return out


def gpt2_demos_case():
    """run.py's demonstration templates (`create_prompt(gold_path_texts, template) + " " +
    question`, joined by spaces before the template), one per demonstration set."""
    settings, scorer = gpt2_case()
    demos = demo_records(hotpot_rows()[N_QUESTIONS:2 * N_QUESTIONS])
    (OUT / "demos.json").write_text(json.dumps(demos, indent=1) + "\n")
    settings = {**demo_settings(demos, scorer.tok, 40, False), "ensemble": "mean", "title": False,
                "temperature": 1.0, "max_doc_tokens": 120, "max_prompt_tokens": 1000}
    return settings, Scorer(scorer.model, scorer.tok, False, settings)


def demo_settings(demos, tok, demo_max_doc, specials):
    """Demonstration sets (0,1) and (2,3) before hopscore's first instruction, texts cut
    to `demo_max_doc` tokens (`specials`: counting the tokenizer's special tokens)."""
    instructions = instruction_templates("after", 1)
    demo_ids = [[0, 1], [2, 3]]
    cut = [{**d, "gold_path_texts": [shorten(tok, p, demo_max_doc, specials) for p in d["gold_path_texts"]]}
           for d in demos]
    templates = []
    for ids in demo_ids:
        for t in instructions:
            examples = [render(t, cut[i]["gold_path_texts"]) + " " + cut[i]["question"] for i in ids]
            templates.append(" ".join(examples) + " " + t)
    return {"templates": templates, "instructions": instructions, "demo_ids": demo_ids,
            "truncate_demos": True, "demo_max_doc_tokens": demo_max_doc}


def t5_demos_case():
    """The v1.1-layout T5 of tests/fixtures/t5/v1_1 (make_t5_goldens.py; scored in
    float64) with two demonstration sets averaged, demonstrations cut to 30 tokens and
    encoder inputs to 470 (so long paths lose their instruction, as in the official
    code), documents to 60, T = 1.3."""
    from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

    d = FIXTURES / "t5" / "v1_1"
    tok = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token="</s>",
                                  pad_token="<pad>", unk_token="<unk>")
    model = T5ForConditionalGeneration.from_pretrained(str(d)).double()
    assert not torch.equal(model.lm_head.weight, model.shared.weight), "v1.1 keeps its own lm_head"
    model.eval()
    demos = demo_records(hotpot_rows()[N_QUESTIONS:2 * N_QUESTIONS])
    settings = {**demo_settings(demos, tok, 30, True), "ensemble": "mean", "title": False,
                "temperature": 1.3, "max_doc_tokens": 60, "max_prompt_tokens": 470}
    return settings, T5Scorer(model, tok, settings)


def smollm2_case():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wdir, name = require_smollm2()
    tok = AutoTokenizer.from_pretrained(str(wdir), gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(str(wdir), gguf_file=name, dtype=torch.float32)
    model.eval()
    add_bos = bool(getattr(tok, "add_bos_token", False))
    settings = {"templates": instruction_templates("after", 1), "ensemble": "mean", "title": False,
                "temperature": 1.0, "max_doc_tokens": 230, "max_prompt_tokens": 600}
    return settings, Scorer(model, tok, add_bos, settings)


def main():
    torch.set_num_threads(2)
    cases = sys.argv[1:] or ["gpt2", "smollm2"]
    rows = data_rows()
    for case in cases:
        cases_of = {"gpt2": gpt2_case, "gpt2_demos": gpt2_demos_case, "t5_demos": t5_demos_case,
                    "smollm2": smollm2_case}
        settings, scorer = cases_of[case]()
        questions = []
        for r in rows:
            try:
                questions.append(search(scorer, settings["templates"], settings["ensemble"],
                                        settings["title"], r))
            except PromptTooLong as e:
                questions.append({"id": r["_id"], "error": str(e)})
        out = {
            "dataset": "hotpot_dev_distractor_sample600",
            "pool": POOL, "first_hops": K1, "second_hops": K2,
            **settings,
            "questions": questions,
        }
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{case}.json").write_text(json.dumps(out, indent=1) + "\n")
        n = sum(len(q.get("prompts", [])) for q in questions)
        bad = sum("error" in q for q in questions)
        print(f"{case}: {len(questions)} questions ({bad} failed), {n} prompts, "
              f"{scorer.cut} with the question cut")


if __name__ == "__main__":
    main()
