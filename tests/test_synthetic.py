"""fic.data.synthetic: deterministic, disjoint splits, checkable answers, shards that partition the task."""

import re

import pytest

from fic.chat import concat_view
from fic.data.sharding import check_coverage, numbers_in
from fic.data.synthetic import SyntheticTask, make_tasks, vocabulary


@pytest.fixture(scope="module")
def train():
    return make_tasks(300, seed=0, split="train")


def test_deterministic_and_seed_dependent(train):
    again = make_tasks(300, seed=0, split="train")
    assert [t.id for t in again] == [t.id for t in train]
    assert [t.phrasings for t in again] == [t.phrasings for t in train]
    other = make_tasks(300, seed=1, split="train")
    assert [t.id for t in other] != [t.id for t in train]


def test_splits_are_disjoint_and_ids_unique(train):
    test = make_tasks(300, seed=0, split="test")
    assert len({t.id for t in train}) == len(train) == 300
    assert not {t.id for t in train} & {t.id for t in test}
    # disjoint by content, not by id spelling: no test task's full prompt occurs in train
    assert not {t.full_prompt for t in train} & {t.full_prompt for t in test}
    # even drawn with different seeds and sizes, the splits never meet
    assert not {t.id for t in make_tasks(800, seed=5, split="train")} & {
        t.id for t in make_tasks(200, seed=9, split="test")
    }


def test_answer_is_the_arithmetic_result(train):
    for task in train:
        meta = task.meta
        assert int(task.answer) == meta["start"] + sum(meta["deltas"])
        assert 0 <= int(task.answer) <= 20


def test_shards_partition_the_task(train):
    for task in train:
        assert len(task.shards) == 4
        assert task.shards[0].endswith("?") and not numbers_in(task.shards[0])  # the first shard states what is asked
        assert all(len(numbers_in(s)) == 1 for s in task.shards[1:])  # each later shard carries one fact
        for phrasing in task.phrasings:
            assert check_coverage(phrasing, list(task.shards)) == []  # every number in exactly one shard


def test_several_single_turn_phrasings_and_concat_form(train):
    task = train[0]
    assert len(set(task.phrasings)) >= 3 and task.full_prompt == task.phrasings[0]
    assert task.concat_prompt == concat_view(list(task.shards))[0]["content"]
    assert task.single_turn_prompts == [*task.phrasings, task.concat_prompt]


def test_no_early_number_equals_the_answer(train):
    """An answer before the last shard cannot be right by echoing a number said so far."""
    for task in train:
        for k in range(1, len(task.shards)):
            assert task.answer not in numbers_in(" ".join(task.shards[:k]))


def test_check(train):
    task = train[0]
    assert task.check(task.reference)
    assert task.check(f"So the answer is {task.answer}.")
    wrong = str(int(task.answer) + 1)
    assert not task.check(f"The answer is {wrong}.")
    assert not task.check("I do not know.")


def test_to_record_uses_the_gsm8k_checker(train):
    from fic.data import check_answer

    record = train[0].to_record()
    assert record.id == train[0].id and record.meta["shards"] == list(train[0].shards)
    assert check_answer(record, train[0].reference) is True


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_steps_set_the_number_of_shards(steps):
    tasks = make_tasks(20, seed=0, split="test", steps=steps)
    assert all(len(t.shards) == steps + 2 and isinstance(t, SyntheticTask) for t in tasks)
    assert all(len(t.meta["deltas"]) == steps for t in tasks)


def test_vocabulary_covers_every_word(train):
    vocab = set(vocabulary())
    for task in train + make_tasks(50, steps=3) + make_tasks(50, steps=1):
        for text in [*task.single_turn_prompts, *task.shards, task.reference]:
            assert set(re.findall(r"\w+|[^\w\s]+", text)) <= vocab


@pytest.mark.parametrize(
    "kwargs, field",
    [({"split": "dev"}, "split"), ({"family": "chess"}, "family"), ({"steps": 5}, "steps"), ({"n": -1}, "n")],
)
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"n": 3, **kwargs}
    with pytest.raises(ValueError, match=field):
        make_tasks(**args)
