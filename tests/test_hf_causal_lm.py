"""Model hf-causal-lm: a Hugging Face config.json scaled by a width rule and swept as the
transformers class itself (Llama, Qwen2, GPT-NeoX), its counts checked against the class
built for real and against the built-in Llama's analytic counts; a rule that cannot scale
the config is one line (CLI exit 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import PlanError
from flops_fit.store.run_store import RunStore

transformers = pytest.importorskip("transformers", reason="model hf-causal-lm needs transformers")

CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 64,
              "tie_word_embeddings": False},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 64,
              "tie_word_embeddings": True},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4,
                 "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 64, "rotary_pct": 0.25},
}
CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}


def write_config(folder: Path, kind: str) -> str:
    (folder / kind).mkdir()
    (folder / kind / "config.json").write_text(json.dumps(CONFIGS[kind]))
    return str(folder / kind)  # the folder: as a checkpoint from the hub is laid out


def corpus(folder: Path) -> dict:
    (folder / "corpus").mkdir()
    for i, source in enumerate(sorted(Path(flops_fit.__file__).parent.glob("*.py"))[:4]):
        (folder / "corpus" / f"{i}.txt").write_text(source.read_text())
    return {"paths": [str(folder / "corpus")], "validation_fraction": 0.25}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_a_config_sweeps_as_its_transformers_class(kind, tmp_path):
    model_config = {"config": write_config(tmp_path, kind)}
    result = flops_fit.sweep(
        model="hf-causal-lm", model_config=model_config, dataset="text-files", dataset_config=corpus(tmp_path),
        budgets=[1e9], sizes=[32, 64, 96], seq_len=16, batch_size=4, min_steps=3, eval_tokens=256,
        out_dir=tmp_path / "out", show_progress=False, checkpoint_seconds=0)
    runs = result.runs
    assert list(runs["status"]) == ["done"] * 3 and all(math.isfinite(x) for x in runs["loss"])
    with RunStore(tmp_path / "out") as store:  # the class itself: no parity case applies, and the gate says why
        assert store.get_meta("parity") == {"status": "not applicable", "reason": "the model is the transformers "
                                            "class itself, so there is nothing to convert or compare"}
    for size, params in zip(runs["size"], runs["params"], strict=True):
        built = flops_fit.create_model("hf-causal-lm", int(size), **model_config, context_length=16)
        assert type(built.hf).__name__ == CLASSES[kind]
        # the class built for real, at the rule's dimensions, from transformers' own config class
        scale = int(size) / 64
        fields = {k: int(v * scale) for k, v in CONFIGS[kind].items()
                  if k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")}
        reference = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**{**CONFIGS[kind], **fields}))
        assert params == sum(p.numel() for p in reference.parameters()) == built.num_params()


def test_counts_match_the_builtin_llamas_analytic_counts(tmp_path):
    config = {"config": write_config(tmp_path, "llama"), "context_length": 32}
    entry, llama = flops_fit.model_info("hf-causal-lm"), flops_fit.model_info("llama")
    for size in (32, 64, 160):  # 160: beyond the sizes the polynomial was solved from
        same = {"n_layer": 2, "n_head": size // 16, "n_kv_head": size // 32, "intermediate_size": 176 * size // 64,
                "vocab_size": 256, "block_size": 32}
        assert entry.params(size, **config) == llama.params(size, **same)
        assert entry.flops_per_unit(size, **config) == llama.flops_per_unit(size, **same)


def test_depth_scales_with_the_width_when_asked(tmp_path):
    config = {"config": write_config(tmp_path, "qwen2"), "depth": "num_hidden_layers", "context_length": 16}
    model = flops_fit.create_model("hf-causal-lm", 96, **config)
    assert model.hf.config.num_hidden_layers == 3 and model.hf.config.intermediate_size == 240
    assert flops_fit.model_info("hf-causal-lm").params(96, **config) == model.num_params()


def test_a_rule_naming_a_missing_field_is_one_line_and_exit_2(tmp_path, capsys):
    folder = write_config(tmp_path, "llama")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\n\n[model]\n'
                     f'config = "{folder}"\nscale = ["ffn_dim", "num_attention_heads"]\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'ffn_dim'" in err and "fix scale" in err


@pytest.mark.parametrize(("change", "message"), [
    ({"set": {"num_attention_heads": 4.5}}, "'num_attention_heads' is 4.5, not a positive integer"),
    ({"set": {"hidden_size": 60}}, "head size 15 is odd"),  # every size the rule reaches has heads of 15
    ({"config": "/nonexistent/config.json"}, "no such config.json"),
    # both heads fields scale (the default): "scale both heads fields, or neither" was no fix
    ({"set": {"num_key_value_heads": 3}}, r"the config's num_attention_heads = 4 is not divisible by its "
                                          r"num_key_value_heads = 3, .*: fix the config \(or \[model\] set\)"),
])
def test_a_config_the_rule_cannot_scale_names_the_field(change, message, tmp_path):
    config = {"config": write_config(tmp_path, "llama"), **change}
    with pytest.raises(PlanError, match=message):
        flops_fit.plan(model="hf-causal-lm", model_config=config, budgets=[1e9], seq_len=16, max_size=256)


def test_a_config_edited_after_the_plan_plans_new_runs_and_the_old_ones_refuse(tmp_path):
    """A config given as a file is planned with its content's sha256: an edit that keeps every size's
    parameter count (the rotary base) plans runs of other ids, so a sweep resumed in the same folder
    does not fit both models together; a run planned before the edit refuses to build, saying why,
    and trains once the file is restored. An edit that changes the counts is caught as well (by the
    fingerprint first; ``training.loop.built`` stays as the last guard)."""
    from flops_fit.training.loop import train

    folder, data = write_config(tmp_path, "llama"), corpus(tmp_path)

    def first_run():
        return flops_fit.plan(model="hf-causal-lm", model_config={"config": folder}, dataset="text-files",
                              dataset_config=data, budgets=[1e9], sizes=[32, 64, 96], seq_len=16,
                              batch_size=4, min_steps=3, eval_tokens=64).runs[0]

    planned = first_run()
    assert len(planned.model_config["config_sha256"]) == 64
    for edit in ({"rope_theta": 500000.0}, {"num_hidden_layers": 3}):
        (tmp_path / "llama" / "config.json").write_text(json.dumps({**CONFIGS["llama"], **edit}))
        with pytest.raises(ValueError, match=r"changed since this run was planned .*restore the file, or plan again"):
            train(planned)
        assert first_run().run_id != planned.run_id
    (tmp_path / "llama" / "config.json").write_text(json.dumps(CONFIGS["llama"], indent=2))  # layout aside
    assert first_run().run_id == planned.run_id
    assert train(planned).status == "done"


def test_a_labs_config_with_its_tokenizers_special_ids_plans_on_the_datasets_vocabulary(tmp_path):
    """A config as a lab has it (a 32k vocabulary, its pad and end ids): on the byte-level dataset
    (256 tokens) those ids name tokens of another tokenizer. A pad id past 256 failed inside
    nn.Embedding (a traceback from `flops-fit plan`); now the ids are dropped, and kept where the
    dataset's vocabulary is the config's."""
    lab = {**CONFIGS["llama"], "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": [2, 31998],
           "pad_token_id": 31999}
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "config.json").write_text(json.dumps(lab))
    p = flops_fit.plan(model="hf-causal-lm", model_config={"config": str(tmp_path / "lab")}, budgets=[3e9],
                       sizes=[32, 64, 96], seq_len=16, batch_size=4, min_steps=3)
    assert [r.params for r in p.runs] == [
        flops_fit.create_model("hf-causal-lm", r.size, config=str(tmp_path / "lab"), vocab_size=256,
                               context_length=16).num_params() for r in p.runs]
    built = flops_fit.create_model("hf-causal-lm", 32, config=str(tmp_path / "lab"), vocab_size=256, context_length=16)
    config = built.hf.config
    assert (config.vocab_size, config.pad_token_id, config.bos_token_id, config.eos_token_id) == (256, None, None, None)
    same = flops_fit.create_model("hf-causal-lm", 32, config=str(tmp_path / "lab"), vocab_size=32000, context_length=16)
    assert (same.hf.config.pad_token_id, same.hf.config.eos_token_id) == (31999, [2, 31998])


def test_an_encoder_config_is_refused_unless_it_is_a_decoder(tmp_path):
    """A BERT config planned and trained as BertLMHeadModel, which attends both ways without is_decoder:
    each position saw the token it was trained to predict. Refused, naming the fix; with it, causal."""
    torch = pytest.importorskip("torch")
    (tmp_path / "bert").mkdir()
    transformers.BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=256, num_hidden_layers=1,
                            vocab_size=64).save_pretrained(tmp_path / "bert")
    config = {"config": str(tmp_path / "bert")}
    with pytest.raises(PlanError, match=r"model_type 'bert' is an encoder: .* add set = \{is_decoder = true\}"):
        flops_fit.plan(model="hf-causal-lm", model_config=config, budgets=[1e9], seq_len=16, max_size=256)
    model = flops_fit.create_model("hf-causal-lm", size=64, set={"is_decoder": True}, context_length=16, **config)
    model.eval()
    tokens = torch.randint(0, 64, (1, 16))
    later = tokens.clone()
    later[0, 10] = (later[0, 10] + 1) % 64
    with torch.no_grad():
        assert torch.allclose(model(tokens)[0, :10], model(later)[0, :10], atol=1e-6)  # no position sees a later token


def test_a_class_without_sdpa_attention_builds_with_its_own_attention(tmp_path):
    """A Gemma2 config (its class has no SDPA path in transformers 5) was planned, then refused by the
    preflight: "Gemma2ForCausalLM does not support an attention implementation through sdpa", since the
    build asked every class for SDPA. Now transformers picks: SDPA where the class has it, eager otherwise."""
    torch = pytest.importorskip("torch")
    (tmp_path / "gemma2").mkdir()
    transformers.AutoConfig.for_model("gemma2", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
                                      vocab_size=256).save_pretrained(tmp_path / "gemma2")
    model = flops_fit.create_model("hf-causal-lm", 64, config=str(tmp_path / "gemma2"), context_length=16)
    assert type(model.hf).__name__ == "Gemma2ForCausalLM" and model.hf.config._attn_implementation == "eager"
    assert torch.isfinite(model(torch.randint(0, 256, (2, 16)))).all()
    llama = flops_fit.create_model("hf-causal-lm", 64, config=write_config(tmp_path, "llama"), context_length=16)
    assert llama.hf.config._attn_implementation == "sdpa"
    for key in ("_attn_implementation", "attn_implementation"):  # a config's own choice, for its own hardware
        (tmp_path / key).mkdir()
        (tmp_path / key / "config.json").write_text(json.dumps({**CONFIGS["llama"], key: "flash_attention_2"}))
        built = flops_fit.create_model("hf-causal-lm", 64, config=str(tmp_path / key), context_length=16)
        assert built.hf.config._attn_implementation == "sdpa"


def saved_config(folder: Path, kind: str, **fields) -> str:
    """A config as transformers saves it (``save_pretrained``: ``layer_types`` listed per layer)."""
    base = {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "vocab_size": 256}
    transformers.AutoConfig.for_model(kind, **{**base, **fields}).save_pretrained(folder / kind)
    return str(folder / kind)


def test_a_saved_configs_layer_types_follow_the_depth(tmp_path, capsys):
    """A Qwen2 config saved by transformers lists each layer's attention (``layer_types``). With
    depth = "num_hidden_layers" (or set = {num_hidden_layers = ...}) `flops-fit plan` died in a
    traceback ("`num_hidden_layers` (1) must be equal to the number of `layer_types` (2)"). Now a
    list that repeats a pattern is repeated to the new depth; one with no pattern to repeat is one
    line naming layer_types (exit 2)."""
    qwen = {"config": saved_config(tmp_path, "qwen2"), "depth": "num_hidden_layers", "context_length": 16}
    model = flops_fit.create_model("hf-causal-lm", 96, **qwen)
    assert model.hf.config.layer_types == ["full_attention"] * 3
    assert flops_fit.model_info("hf-causal-lm").params(96, **qwen) == model.num_params()
    alternating = {"config": saved_config(tmp_path, "gemma2", num_hidden_layers=4, head_dim=16),
                   "depth": "num_hidden_layers", "context_length": 16}
    deeper = flops_fit.create_model("hf-causal-lm", 96, **alternating).hf.config
    assert deeper.layer_types == ["sliding_attention", "full_attention"] * 3
    fixed = flops_fit.create_model("hf-causal-lm", 64, config=alternating["config"], set={"num_hidden_layers": 2},
                                   context_length=16)
    assert fixed.hf.config.layer_types == ["sliding_attention", "full_attention"]
    (tmp_path / "mixed").mkdir()  # Qwen2's sliding window above its first layer: no pattern to repeat
    (tmp_path / "mixed" / "config.json").write_text(json.dumps(
        {**json.loads((tmp_path / "qwen2" / "config.json").read_text()),
         "layer_types": ["full_attention", "sliding_attention"]}))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\n\n[model]\n'
                     f'config = "{tmp_path / "mixed"}"\nset = {{num_hidden_layers = 3}}\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "layer_types" in err and "Traceback" not in err


@pytest.mark.parametrize(("change", "named"), [
    ({"hidden_act": "swishy"}, "hidden_act = 'swishy'"),  # KeyError inside transformers' activations
    ({"rope_scaling": {"rope_type": "bogus"}}, "rope_type = 'bogus'"),  # KeyError in its rotary init
])
def test_a_config_transformers_cannot_build_is_one_line_naming_the_field(change, named, tmp_path, capsys):
    """An unknown activation in a lab's config.json made `flops-fit plan` die in a traceback ending in
    "KeyError: 'swishy'" (exit 1); now it is one line naming the field and the fix (exit 2)."""
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "config.json").write_text(json.dumps({**CONFIGS["llama"], **change}))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\n\n[model]\n'
                     f'config = "{tmp_path / "lab"}"\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err and "Traceback" not in err


def test_a_saved_head_dim_grows_with_the_width_when_the_heads_do_not(tmp_path):
    """transformers writes head_dim into every Llama config.json it saves (16 = 64 / 4 here). With the heads
    left out of scale, the guide says the heads grow; they kept head size 16, so the attention of a
    width-128 model was 64 wide. Now a head_dim that is the config's width / heads follows the width; one
    of its own (Gemma's 256 beside 3072 / 16) is kept."""
    folder = saved_config(tmp_path, "llama")
    assert json.loads((tmp_path / "llama" / "config.json").read_text())["head_dim"] == 16
    rule = {"config": folder, "scale": ["intermediate_size"], "context_length": 16}
    model = flops_fit.create_model("hf-causal-lm", 128, **rule)
    assert (model.hf.config.num_attention_heads, model.hf.config.head_dim) == (4, 32)
    assert tuple(model.hf.model.layers[0].self_attn.q_proj.weight.shape) == (128, 128)
    assert flops_fit.model_info("hf-causal-lm").params(128, **rule) == model.num_params()
    scaled = flops_fit.create_model("hf-causal-lm", 128, config=folder, context_length=16).hf.config
    assert (scaled.num_attention_heads, scaled.head_dim) == (8, 16)  # the default rule: heads grow in number
    own = flops_fit.create_model("hf-causal-lm", 128, config=folder, scale=["intermediate_size"],
                                 set={"head_dim": 32}, context_length=16).hf.config
    assert own.head_dim == 32  # not 64 / 4: the config's own head size, kept


def test_a_misspelt_set_field_is_refused_naming_the_field_it_may_mean(tmp_path):
    """set = {num_hiden_layers = 4} planned and trained the config's 2 layers without a word (transformers
    keeps any unknown keyword as an attribute). Now a field neither the config file nor its class has is
    refused, with the nearest field; a field the class has at its default (not written in the file) is set."""
    folder = write_config(tmp_path, "llama")  # a config.json written by hand: the fields it changes only
    assert "attention_dropout" not in CONFIGS["llama"]
    with pytest.raises(PlanError, match=r"set names 'num_hiden_layers', a field .*'llama' .*num_hidden_layers"):
        flops_fit.plan(model="hf-causal-lm", model_config={"config": folder, "set": {"num_hiden_layers": 4}},
                       budgets=[1e9], seq_len=16, max_size=256)
    model = flops_fit.create_model("hf-causal-lm", 64, config=folder, set={"attention_dropout": 0.25},
                                   context_length=16)
    assert model.hf.config.attention_dropout == 0.25


def test_a_misspelt_field_of_the_config_file_is_refused_naming_the_default_it_would_take(tmp_path, capsys):
    """A lab's config.json with "num_hidden_layer": 2 planned (and would train) llama's default 32 layers without
    a word: transformers keeps the unknown key and ignores it. A file's field its class lacks, spelt like a class
    field the file leaves unset, is now refused naming both (exit 2); a field of its own with no such twin (a
    lab's note) plans as before, and `set` supplying the field makes the file's spelling harmless."""
    lab = {k: v for k, v in CONFIGS["llama"].items() if k != "num_hidden_layers"}
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "config.json").write_text(json.dumps({**lab, "num_hidden_layer": 2}))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\nmax_size = 256\n\n'
                     '[model]\nconfig = "lab"\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the config file's 'num_hidden_layer' is no field of 'llama' configs, and its " \
        "'num_hidden_layers' is not set: transformers would ignore 'num_hidden_layer' and use its default " \
        "num_hidden_layers = 32" in err, err
    model = flops_fit.create_model("hf-causal-lm", 64, config=str(tmp_path / "lab"), set={"num_hidden_layers": 2},
                                   context_length=16)
    assert model.hf.config.num_hidden_layers == 2
    (tmp_path / "lab" / "config.json").write_text(json.dumps({**CONFIGS["llama"], "lab_note": "run 7 recipe"}))
    model = flops_fit.create_model("hf-causal-lm", 64, config=str(tmp_path / "lab"), context_length=16)
    assert model.hf.config.num_hidden_layers == 2


def test_a_class_that_cannot_be_counted_on_the_meta_device_is_one_line(tmp_path, capsys):
    """A Mixtral (mixture-of-experts) config made `flops-fit plan` die in a traceback from inside the
    experts' grouped matmul ("Expected mat_a to be BFloat16 ...", exit 1) while counting FLOPs on the
    meta device; now it is one line saying the count failed and why (exit 2)."""
    (tmp_path / "moe").mkdir()
    transformers.AutoConfig.for_model("mixtral", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=256,
                                      num_local_experts=4, num_experts_per_tok=2).save_pretrained(tmp_path / "moe")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\n\n[model]\n'
                     f'config = "{tmp_path / "moe"}"\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'mixtral'" in err and "meta device" in err


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
def test_a_configs_dtype_does_not_set_the_weights_precision(key, tmp_path):
    """Configs from the hub (and save_pretrained of a bf16 model) carry "torch_dtype": "bfloat16";
    transformers built the class in bf16 from it, so a sweep of precision fp32 (or bf16 autocast over
    fp32 weights) trained pure bf16 weights without a word. The sweep's precision decides now."""
    torch = pytest.importorskip("torch")
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "config.json").write_text(json.dumps({**CONFIGS["llama"], key: "bfloat16"}))
    model = flops_fit.create_model("hf-causal-lm", 64, config=str(tmp_path / "hub"), context_length=16)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gemma2"])  # GQA untied; tied; head_dim and sliding layers
def test_counts_match_the_class_run_for_real_on_the_cpu(kind, tmp_path):
    """The planner's parameters and training FLOPs per token (counted on the meta device, solved as a
    polynomial in the size) against the class built from transformers' own config and run for real: a
    forward and backward on the CPU under FlopCounterMode, attention eager (scores counted in full)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    folder = saved_config(tmp_path, kind, **({"head_dim": 16} if kind == "gemma2" else {}))
    config, entry, seq = {"config": folder, "context_length": 32}, flops_fit.model_info("hf-causal-lm"), 32
    for size in (64, 96):
        fields = json.loads(Path(folder, "config.json").read_text())
        fields.pop("transformers_version", None)
        scale = size / fields["hidden_size"]
        fields.update(hidden_size=size, **{k: int(fields[k] * scale) for k in
                                           ("intermediate_size", "num_attention_heads", "num_key_value_heads")})
        hf = transformers.AutoConfig.for_model(**fields)
        hf._attn_implementation = "eager"
        reference = transformers.AutoModelForCausalLM.from_config(hf)
        with FlopCounterMode(display=False) as counter:
            reference(input_ids=torch.randint(0, 256, (1, seq))).logits.sum().backward()
        assert entry.params(size, **config) == sum(p.numel() for p in reference.parameters())
        assert entry.flops_per_unit(size, **config) * seq == counter.get_total_flops()


def test_a_config_that_is_not_an_object_or_names_an_unknown_model_type_is_one_short_line(tmp_path):
    """A config.json holding a list raised AttributeError (a traceback, exit 1); an unknown model_type
    gave transformers' refusal listing every model type it has (several kilobytes on one line)."""
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(PlanError, match=r"config\.json' holds a JSON list, not an object: give a transformers "
                                        r"config\.json"):
        flops_fit.plan(model="hf-causal-lm", model_config={"config": str(tmp_path)}, budgets=[1e9], seq_len=16)
    config = {**CONFIGS["llama"], "model_type": "lamma"}
    with pytest.raises(PlanError) as err:
        flops_fit.plan(model="hf-causal-lm", model_config={"config": config}, budgets=[1e9], seq_len=16)
    assert "model_type 'lamma' is not one this transformers" in str(err.value) and "'llama'" in str(err.value)
    assert len(str(err.value)) < 400


def test_a_labs_own_architecture_is_one_line_naming_its_code_and_the_ways_to_sweep_it(tmp_path, capsys):
    """A lab's own architecture (a model_type transformers lacks, its class in the lab's code: auto_map)
    was told to "fix the config's model_type, or upgrade transformers" beside a close name that is
    another architecture ('mamba' for 'mylab'): neither sweeps it. Now the line names its code, which
    flops-fit does not run, and the two ways that do: a model plugin, or its own script with declared."""
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "config.json").write_text(json.dumps({
        **CONFIGS["llama"], "model_type": "mylab", "architectures": ["MyLabForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_mylab.MyLabConfig",
                     "AutoModelForCausalLM": "modeling_mylab.MyLabForCausalLM"}}))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nseq_len = 16\n\n[model]\n'
                     f'config = "{tmp_path / "lab"}"\n')
    assert main(["plan", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model_type 'mylab' is not one this transformers" in err
    assert "its class is code of its own (modeling_mylab.MyLabForCausalLM), which flops-fit does not run" in err
    assert "a model plugin (docs/guide/plugins.md)" in err and 'model = "declared"' in err and "mamba" not in err


def test_a_relative_config_is_read_from_the_sweep_files_folder_and_the_ids_keep_the_path_as_written(
        tmp_path, capsys, monkeypatch):
    """`config = "qwen2"` in a sweep file was read from the current folder (`cd /tmp && flops-fit plan
    followups-a/x.toml`: "no such config.json"), unlike [train]'s paths. It is read from the file's folder now;
    the run ids keep the path as written (the folder is not hashed), so a store planned in the file's own folder,
    by any release, is the same sweep planned from anywhere, and its runs build from any folder."""
    lab = tmp_path / "lab"
    lab.mkdir()
    write_config(lab, "qwen2")
    (lab / "x.toml").write_text('[sweep]\nmodel = "hf-causal-lm"\nbudgets = [1e9]\nsizes = [32, 64, 96]\nseq_len = 16\n'
                                'batch_size = 4\nmin_steps = 3\neval_tokens = 256\ncheckpoint_seconds = 0\n'
                                '[model]\nconfig = "qwen2"\n')
    monkeypatch.chdir(lab)  # the ids a store planned in the file's folder holds (the path read from there)
    before = [r.run_id for r in flops_fit.plan(model="hf-causal-lm", model_config={"config": "qwen2"}, budgets=[1e9],
                                               sizes=[32, 64, 96], seq_len=16, batch_size=4, min_steps=3,
                                               eval_tokens=256).runs]
    ids = {}
    for folder in (lab, tmp_path):
        monkeypatch.chdir(folder)
        assert main(["plan", str((lab / "x.toml").relative_to(folder)), "--json"]) == 0
        ids[folder] = [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]]
    assert ids[lab] == ids[tmp_path] == before
    assert main(["sweep", "lab/x.toml", "--out", "out", "--record-only"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["train-run", str(tmp_path / "out"), before[0]]) == 0
    with RunStore(tmp_path / "out") as store:
        assert store.statuses()[before[0]] == "done"


def test_a_plan_reads_the_config_file_once_and_an_edit_again(tmp_path, monkeypatch):
    """The rule read config.json again for every size the planner asked about (2,060 reads planning 10 runs);
    it reads each version of the file once, and an edit (another size or time) again."""
    folder = write_config(tmp_path, "llama")
    reads, real = [], Path.read_text

    def counted(path, *args, **kwargs):  # the real read, counted
        if path.name == "config.json":
            reads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    options = {"model": "hf-causal-lm", "model_config": {"config": folder}, "dataset": "text-files",
               "dataset_config": corpus(tmp_path), "budgets": [1e9], "sizes": [32, 64, 96], "seq_len": 16,
               "batch_size": 4, "min_steps": 3}
    planned = flops_fit.plan(**options)
    assert len(planned.runs) == 3 and len(reads) == 1
    (tmp_path / "llama" / "config.json").write_text(json.dumps({**CONFIGS["llama"], "num_hidden_layers": 3}))
    again = flops_fit.plan(**options)
    assert len(reads) == 2 and again.runs[0].params > planned.runs[0].params


def test_sizes_whose_rotary_share_is_not_a_pair_of_dimensions_are_left_out_and_refused(tmp_path):
    """Phi turns half of each head with rotary embeddings (its class's default, absent from this file) and
    GPT-NeoX a quarter (rotary_pct). With the heads kept (scale the MLP only), Phi's head of 2 at size 8
    turns 1 dimension: transformers builds it, its forward fails, and the plan, which counts the smallest
    sizes, failed whole ("cannot be counted on the meta device") even for sizes=[16, 32, 48], which turn
    2, 4 and 6. GPT-NeoX's head of 2 turned none (no positions). Such sizes are left out now, and a
    size asked for by name is refused naming the share."""
    torch = pytest.importorskip("torch")
    phi = {"model_type": "phi", "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4,
           "num_hidden_layers": 1, "vocab_size": 256, "max_position_embeddings": 64}
    config = {"config": phi, "scale": ["intermediate_size"], "context_length": 16}
    plan = flops_fit.plan(model="hf-causal-lm", model_config=config, budgets=[1e9], sizes=[16, 32, 48], seq_len=16,
                          batch_size=4, min_steps=1)
    assert sorted({run.size for run in plan.runs}) == [16, 32, 48]
    entry = flops_fit.model_info("hf-causal-lm")
    assert entry.sizes(1, 64, **config) == [16, 32, 48, 64]  # heads of 2, 10 and 14 turn 1, 5 and 7
    model = flops_fit.create_model("hf-causal-lm", 16, **config)
    assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 256)
    neox = {"config": write_config(tmp_path, "gpt_neox"), "scale": ["intermediate_size"], "context_length": 16}
    assert entry.sizes(1, 64, **neox) == [32, 40, 64]  # heads of 8, 10 and 16 turn 2, 2 and 4
    with pytest.raises(ValueError, match=r"size 8: rotary embeddings turn 0 of each head's 2 dimensions "
                                         r"\(partial_rotary_factor 0\.25\)"):
        flops_fit.create_model("hf-causal-lm", 8, **neox)
