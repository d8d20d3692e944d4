"""Each context run once for all its choices gives the sums of each (context, choice) row run alone: for every
positional encoding, score function and a sliding window, with contexts and choices of mixed lengths (left- and
right-padded in one batch), items of different numbers of choices, choices of one token, and cut items mixed in."""
import pytest
import torch
import torch.nn.functional as F

from conftest import POS_EMBS, tiny_model
from inference.choices import choice_logprobs
from inference.shared_context import groups, shared_logprobs
from inference.tasks import Encoded


def alone(model, row, n):
    """The sum of log p(row[i] | row[:i]) over row's last n tokens, from a forward of the row by itself."""
    with torch.no_grad():
        logits, _ = model(torch.tensor([row[:-1]]))  # (1, T, V)
    logp = F.log_softmax(logits[0].double(), dim=-1)
    return logp[torch.arange(len(row) - 1), torch.tensor(row[1:])][-n:].sum().item()


def item(context, choices, cut=False):
    rows = [context + c for c in choices]
    return Encoded(rows, [len(c) for c in choices], [len(c) for c in choices], label=0, cut=cut)


def random_items(seed=0, vocab=37):
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    return [item(ids(9), [ids(3), ids(6), ids(1), ids(4)]),  # (context + longest choice: 15 tokens, block 16)
            item(ids(2), [ids(5), ids(2), ids(7), ids(1)]),
            item(ids(12), [ids(1), ids(1), ids(1), ids(1)]),  # every choice one token
            item(ids(5), [ids(2), ids(8)]),  # two choices: a group of its own
            item(ids(1), [ids(4), ids(3)])]


@pytest.mark.parametrize("config", [dict(pos_emb=p) for p in POS_EMBS] + [
    dict(attn_score="additive"), dict(attn_score="bilinear"), dict(window=4), dict(pos_emb="alibi", window=3)])
def test_each_context_run_once_scores_every_choice_as_its_row_alone(config):
    model = tiny_model(**config)
    items = random_items()
    got = shared_logprobs(model, items, batch_tokens=1000)
    for it, sums in zip(items, got):
        want = [alone(model, row, n) for row, n in zip(it.rows, it.n_tokens)]
        assert sums == pytest.approx(want, abs=1e-4)


def test_groups_share_a_number_of_choices_and_fit_the_budget_and_the_block():
    items = random_items()
    for batch_tokens in (1, 40, 1000):
        grouped = groups(items, batch_tokens, block_size=16)
        assert sorted(i for g in grouped for i in g) == list(range(len(items)))
        for g in grouped:
            k = {len(items[i].rows) for i in g}
            tc = max(len(items[i].rows[0]) - items[i].n_tokens[0] for i in g)
            tch = max(n for i in g for n in items[i].n_tokens)
            assert len(k) == 1 and tc + tch - 1 <= 16 and (len(g) == 1 or len(g) * tc <= batch_tokens)
    assert len(groups(items, 1000, block_size=16)) == 3  # 4 choices: (9 + 6), (2 + 7), (12 + 1) do not all fit 16


def test_groups_take_the_longest_context_first_and_fill_the_budget_and_the_block_to_the_last_token():
    """Each bound met exactly joins the group: B x Tc == batch_tokens, and Tc + Tch - 1 == block_size."""
    items = [item([1] * 2, [[2], [3]]), item([1] * 9, [[2] * 3, [3]]), item([1] * 5, [[2] * 8, [3]]),
             item([1] * 5, [[2], [3]])]
    # longest context first: 1 (9), then 2 (5 + a choice of 8: 9 + 8 - 1 = 16 columns, 2 x 9 = 18 tokens); 3 would
    # make 3 x 9 = 27 tokens, so it starts a group that 0 joins (2 x 5 = 10)
    assert groups(items, batch_tokens=18, block_size=16) == [[1, 2], [3, 0]]


def test_items_of_different_numbers_of_choices_never_share_a_group():
    """However much room is left: one forward's contexts are repeated k times for their choices, one k per group."""
    items = [item([1] * 3, [[2], [3]]), item([1] * 3, [[2], [3], [4]]), item([1] * 2, [[2], [3], [4]])]
    assert groups(items, batch_tokens=1000, block_size=16) == [[0], [1, 2]]


def test_the_bar_counts_every_row_once_whole_items_and_cut_ones():
    class Bar:
        n = 0

        def update(self, n):
            self.n += n
    items = random_items()
    items[1] = item(items[1].rows[0][:-items[1].n_tokens[0]], [[1, 2]] * 4, cut=True)
    bar = Bar()
    choice_logprobs(tiny_model(), items, batch_tokens=20, bar=bar)
    assert bar.n == sum(len(it.rows) for it in items) == 16


def test_cut_items_go_through_the_rows_and_the_batch_changes_no_score():
    model = tiny_model(pos_emb="learned")
    items = random_items(seed=1)
    g = torch.Generator().manual_seed(5)
    tail = torch.randint(0, 37, (14,), generator=g).tolist()
    items.insert(2, item(tail[-12:], [tail[:4], tail[4:8]], cut=True))  # rows with different context tails
    items[2].rows = [tail[-12:] + tail[:4], tail[-9:] + tail[4:8]]
    one = choice_logprobs(model, items, batch_tokens=1)
    for batch_tokens in (30, 1000):
        got = choice_logprobs(model, items, batch_tokens=batch_tokens)
        assert sum(got, []) == pytest.approx(sum(one, []), abs=1e-5)
    assert one[2] == pytest.approx([alone(model, row, n) for row, n in zip(items[2].rows, items[2].n_tokens)],
                                   abs=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_sums_are_the_cpus():
    model = tiny_model(pos_emb="learned")
    items = random_items(seed=2)
    items.append(item(list(range(10)), [[11, 12, 13, 14, 15, 16, 17], [18]], cut=True))  # through the rows too
    want = choice_logprobs(model, items, batch_tokens=40)
    got = choice_logprobs(model.cuda(), items, batch_tokens=40)
    assert sum(got, []) == pytest.approx(sum(want, []), abs=1e-4)


def test_choices_scored_on_a_device_are_read_back_once_a_group():
    """A group's choices after their first token are scored without a read back (their scored positions are found
    on the host): the group's sums are read once. The meta device raises at a read (tests/pretend_device.py); here
    each is answered and counted."""
    import pretend_device

    items = random_items()
    model = tiny_model().to("meta")
    with pytest.MonkeyPatch.context() as patch:
        reads = pretend_device.answer_reads(patch)
        got = shared_logprobs(model, items, batch_tokens=1000)
    assert [len(s) for s in got] == [len(it.rows) for it in items]
    assert reads == ["tolist"] * len(groups(items, 1000, model.config.block_size))
