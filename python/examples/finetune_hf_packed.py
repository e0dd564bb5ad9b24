"""Fine-tune a Hugging Face model on packed documents with attn_implementation="distflash".

A tiny Llama built from a config (nothing is downloaded) learns synthetic documents: each one
counts up from a random start with a random stride (mod the vocabulary), so the next token is
predictable from the two before it, within a document and never across one. Documents of
random lengths are packed end to end into rows of --seq tokens, with no padding:

  - position_ids restart at 0 in every document: that is all distflash.hf needs to keep the
    documents apart (each becomes one document of the library's mask, built on the device);
  - the first token of each document gets the label -100 (nothing predicts it from the
    previous document), as transformers' DataCollatorWithFlattening does.

The switch is the one argument attn_implementation="distflash" after `import distflash.hf`.
--check compares the first step's loss with the same model under attn_implementation="eager"
(transformers builds a packed-sequence mask from the same position_ids; use_cache=False).

    python3 python/examples/finetune_hf_packed.py                  # CPU, about ten seconds
    python3 python/examples/finetune_hf_packed.py --device cuda --dtype bfloat16 --compile
Prints the loss every --log steps and the last loss; exits non-zero if the loss did not fall.
"""
import argparse
import copy
import sys
import time

import torch

import distflash.hf  # noqa: F401  (registers attn_implementation="distflash")


def documents(n, vocab, gen, min_len=4, max_len=48):
    """n synthetic documents (int64 tensors): start + stride * i (mod vocab)."""
    out = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        start, stride = (int(x) for x in torch.randint(1, vocab, (2,), generator=gen))
        out.append((start + stride * torch.arange(length)) % vocab)
    return out


def pack(docs, seq, batch):
    """Rows [batch, seq] of input ids, position ids and labels, documents end to end (a document
    that does not fit is cut at the row's end, its rest dropped)."""
    ids = torch.zeros(batch, seq, dtype=torch.int64)
    pos = torch.zeros(batch, seq, dtype=torch.int64)
    labels = torch.full((batch, seq), -100, dtype=torch.int64)
    it = iter(docs)
    for b in range(batch):
        t = 0
        while t < seq:
            d = next(it)[: seq - t]
            n = d.shape[0]
            ids[b, t:t + n], pos[b, t:t + n] = d, torch.arange(n)
            labels[b, t + 1:t + n] = d[1:]  # the document's first token: -100
            t += n
    return ids, pos, labels


def build(args, attn):
    import transformers
    torch.manual_seed(args.seed)
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=max(1, args.heads // 2), max_position_embeddings=args.seq)
    dtype = getattr(torch, args.dtype)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype).to(args.device)


def shifted_loss(logits, labels):
    """Next-token cross entropy with the labels already in place (labels[t] is the token at t,
    predicted from t - 1); -100 is ignored."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                                             ignore_index=-100)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--compile", action="store_true", help="torch.compile(model, fullgraph=True)")
    p.add_argument("--check", action="store_true", help="compare the first loss with attn_implementation='eager'")
    p.add_argument("--log", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    model = build(args, "distflash")
    if args.check:
        eager = build(args, "eager")
        eager.load_state_dict(model.state_dict())
    step_fn = torch.compile(model, fullgraph=True) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed + 1)
    losses, t0 = [], time.perf_counter()
    for step in range(args.steps):
        ids, pos, labels = (t.to(args.device) for t in pack(documents(4 * args.batch * args.seq // 8, args.vocab, gen),
                                                            args.seq, args.batch))
        logits = step_fn(input_ids=ids, position_ids=pos, use_cache=False).logits
        loss = shifted_loss(logits, labels)
        if args.check and step == 0:
            with torch.no_grad():
                ref = shifted_loss(eager(input_ids=ids, position_ids=pos, use_cache=False).logits, labels)
            print(f"step 0: loss {loss.item():.6f} (distflash), {ref.item():.6f} (eager)")
            if abs(loss.item() - ref.item()) > 1e-3 * max(1.0, abs(ref.item())):
                print("finetune_hf_packed: distflash and eager disagree", file=sys.stderr)
                return 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if args.log and (step % args.log == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - t0:.1f} s)")
    first, last = sum(losses[:3]) / min(3, len(losses)), sum(losses[-3:]) / min(3, len(losses))
    print(f"finetune_hf_packed: loss {first:.4f} -> {last:.4f} in {args.steps} steps, "
          f"{time.perf_counter() - t0:.1f} s on {args.device}")
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
