"""A PEFT adapter that fails to load leaves the shared model exactly as it was (a tiny Llama, real PEFT)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import peft
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from playground.errors import ParameterError
from playground.models.adapters import Adapters, adapter_problem
from playground.providers.base import Capabilities
from playground.providers.registry import Registry

IDS = torch.tensor([[1, 2, 3, 4]])


def _tiny() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    return LlamaForCausalLM(config).eval()


def _lora(folder: Path, seed: int) -> str:
    base = _tiny()
    torch.manual_seed(seed)
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(base, lora).save_pretrained(folder)
    return str(folder)


def _logits(model: LlamaForCausalLM) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("size mismatch, say\nand more lines")


def test_a_load_that_fails_after_injecting_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PEFT injects an adapter's layers and registers its name before loading its weights; a failure there used to
    leave random LoRA layers in every later request, and the adapter then served with them."""
    model = _tiny()
    first, second = _lora(tmp_path / "first", 1), _lora(tmp_path / "second", 2)
    base, modules = _logits(model), dict(model.named_modules())
    adapters = Adapters(model)

    def refused(adapter: str) -> None:
        with monkeypatch.context() as patched:
            patched.setattr(peft.peft_model, "set_peft_model_state_dict", _boom)  # after the injection
            with pytest.raises(ParameterError, match="cannot load adapter '.*': size mismatch, say$"):
                with adapters.use(adapter):
                    pass

    refused(first)  # the first adapter: PeftModel.from_pretrained
    assert dict(model.named_modules()) == modules and not hasattr(model, "peft_config")
    assert torch.equal(_logits(model), base)
    with adapters.use(first):
        adapted = _logits(model)
    assert not torch.allclose(adapted, base) and torch.equal(_logits(model), base)
    refused(second)  # beside a loaded one: load_adapter
    assert second not in adapters._peft.peft_config
    assert torch.equal(_logits(model), base)
    with adapters.use(first):
        assert torch.equal(_logits(model), adapted)
    with adapters.use(second):  # once it loads, it is itself
        assert not torch.allclose(_logits(model), adapted)
    assert torch.equal(_logits(model), base)


def test_a_listed_folder_that_is_not_there_is_named_plainly(tmp_path: Path) -> None:
    """It was "'/x/missing_lora' is not a hub id (org/name): Repo id must be in the form ..."."""
    missing = str(tmp_path / "missing_lora")
    with pytest.raises(ParameterError) as refused:
        Adapters(_tiny(), [missing]).prepare(missing)
    assert refused.value.message == f"cannot load adapter {missing!r}: no such folder on this server"


def test_an_adapter_that_can_never_load_is_named_from_its_name_and_this_machine(tmp_path: Path) -> None:
    """`--adapters` with a folder holding no adapter, or a name that is no hub id, started and listed it, and each
    request naming it was a 422; the hub is not asked (a hub id that is well formed is left to the request)."""
    assert adapter_problem(str(tmp_path / "missing")) == "no such adapter folder"
    assert adapter_problem(str(tmp_path)) == "no adapter_config.json in that folder (not a PEFT adapter)"
    assert adapter_problem("my lora").startswith("not a folder here, nor a hub id (Repo id must use alphanumeric")
    assert "Cannot have -- or .." in adapter_problem("org/lo--ra")
    assert adapter_problem(_lora(tmp_path / "lora", seed=1)) is None
    assert adapter_problem("some-org/some-lora") is None


class Lender:
    """A local provider lending engines that list the same adapters (`--adapters` reaches every local model)."""

    provider_id, provider_type = "local", "local::transformers"
    capabilities = Capabilities(local_engine=True, model_loading=True)

    def __init__(self, models: dict[str, LlamaForCausalLM], adapters: list[str]) -> None:
        self.engines = [SimpleNamespace(model_id=m, adapters=Adapters(model, adapters)) for m, model in models.items()]

    def list_models(self) -> list[str]:
        return [engine.model_id for engine in self.engines]

    def loaded_engines(self) -> list[SimpleNamespace]:
        return self.engines

    def known(self, name: str) -> str | None:
        return name if name in self.list_models() else None


def _made_for(model: LlamaForCausalLM, folder: Path) -> str:
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, lora).save_pretrained(folder)
    return str(folder)


def _wide(name: str) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    config._name_or_path = name
    return LlamaForCausalLM(config).eval()


def test_an_adapter_is_listed_once_under_the_model_it_was_made_for_and_requests_reach_that_model(
    tmp_path: Path,
) -> None:
    """It was listed once per loaded model (ten models, ten copies) and `model: <adapter>` always went to the first,
    which refused an adapter of another model's shapes."""
    small, wide, twin = _tiny(), _wide("/models/wide"), _wide("/models/twin")
    for_small, for_wide = _made_for(_tiny(), tmp_path / "small"), _made_for(_wide("/x"), tmp_path / "wide")
    for_twin = _made_for(_wide("/models/twin"), tmp_path / "twin")  # shapes as `wide`'s, named for `twin`
    gone = str(tmp_path / "gone")  # not readable here: the default model's
    lender = Lender({"wide": wide, "small": small, "twin": twin}, [for_small, for_wide, for_twin, gone])
    registry = Registry([lender], default_model="small")
    assert sorted(registry.adapters()) == sorted(
        [
            ("local", "small", for_small),
            ("local", "wide", for_wide),
            ("local", "twin", for_twin),
            ("local", "small", gone),
        ]
    )
    assert registry.adapter(for_wide) == (lender, "wide", for_wide)
    assert registry.adapter(f"{for_twin}/") == (lender, "twin", for_twin)
    assert registry.adapter(for_small)[1] == registry.adapter(gone)[1] == "small"
    assert registry.adapter(str(tmp_path / "unlisted")) is None


def test_without_peft_an_adapter_fits_no_model_better_and_listing_does_not_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """peft is optional on a server: /v1/models (which asks each model how an adapter fits) must still answer."""
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    assert Adapters(object(), [str(tmp_path)]).fit(str(tmp_path)) == 0
