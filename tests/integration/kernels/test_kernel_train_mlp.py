"""train_mlp end to end on the CPU nodes: the weights against a numpy trainer
in float64 (the same Philox init, each rank walking its own contiguous shard
in order, SGD with momentum), > 95 % accuracy and a falling loss on separable
blobs, 3 ranks (resources.gpus) with uneven shards and a short last step,
and the errors: 422
naming the field before the job is queued, labels out of range failing the
job on inputs.y."""

import numpy as np
import pytest

from stack import decode, tensor

M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """Philox-4x32-10 on arrays of counters (4 uint64 arrays holding 32-bit
    words) under one key, as kernels/kl_philox.h computes it."""
    c = [np.asarray(w, dtype=np.uint64) for w in ctr]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & np.uint64(M32),
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & np.uint64(M32)]
        if r < 9:
            k0 = np.uint64((int(k0) + 0x9E3779B9) & M32)
            k1 = np.uint64((int(k1) + 0xBB67AE85) & M32)
    return c


def mlp_init(d, h, c, seed):
    """The flat parameter vector [w1 | b1 | w2 | b2] of kl__mlp_init, in
    float32: element i draws word i%4 of block i//4."""
    size = d * h + h + h * c + c
    blocks = np.arange((size + 3) // 4, dtype=np.uint64)
    words = philox4x32_10([blocks & np.uint64(M32), blocks >> np.uint64(32),
                           np.full_like(blocks, 0x6D6C7069), np.zeros_like(blocks)],
                          (seed & M32, seed >> 32))
    bits = np.stack(words, axis=1).reshape(-1)[:size].astype(np.uint32)
    u = bits.astype(np.float32) * np.float32(2.0 ** -32) + np.float32(2.0 ** -33)
    u = np.float32(2) * u - np.float32(1)
    p = np.zeros(size, np.float32)
    s1, s2 = np.float32(np.sqrt(6.0 / d)), np.float32(np.sqrt(6.0 / (h + c)))
    p[:d * h] = u[:d * h] * s1
    w2 = d * h + h
    p[w2:w2 + h * c] = u[w2:w2 + h * c] * s2
    return p


def step_rows(n, world, batch):
    """The rows of each step over a world of ranks (README, train_mlp): rank
    r owns [r*n//W, (r+1)*n//W) and takes ceil(batch/W) of them a step."""
    lb = -(-batch // world)
    shards = [(r * n // world, (r + 1) * n // world) for r in range(world)]
    steps = -(-max(hi - lo for lo, hi in shards) // lb)
    for s in range(steps):
        yield np.concatenate([np.arange(min(lo + s * lb, hi), min(lo + (s + 1) * lb, hi))
                              for lo, hi in shards])


def numpy_train(x, y, hidden, classes, epochs, batch, lr, momentum, seed, world=1):
    """float64 trainer: each step's rows (step_rows), gradient of the summed
    loss over them divided by their count, v = m*v + g, w -= lr*v."""
    n, d = x.shape
    h, c = hidden, classes
    p = mlp_init(d, h, c, seed).astype(np.float64)
    w1, b1 = p[:d * h].reshape(d, h), p[d * h:d * h + h]
    w2, b2 = p[d * h + h:d * h + h + h * c].reshape(h, c), p[d * h + h + h * c:]
    params = [w1, b1, w2, b2]
    vel = [np.zeros_like(q) for q in params]
    x = x.astype(np.float64)
    onehot = np.eye(c)[y]
    losses = []
    for _ in range(epochs):
        total = 0.0
        for rows in step_rows(n, world, batch):
            xb, tb = x[rows], onehot[rows]
            hid = np.maximum(xb @ w1 + b1, 0)
            logits = hid @ w2 + b2
            mx = logits.max(axis=1, keepdims=True)
            lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1))
            total += (lse - (logits * tb).sum(axis=1)).sum()
            dl = np.exp(logits - lse[:, None]) - tb
            dh = (dl @ w2.T) * (hid > 0)
            grads = [xb.T @ dh, dh.sum(axis=0), hid.T @ dl, dl.sum(axis=0)]
            for q, v, g in zip(params, vel, grads):
                v *= momentum
                v += g / len(xb)
                q -= lr * v
        losses.append(total / n)
    pred = (np.maximum(x @ w1 + b1, 0) @ w2 + b2).argmax(axis=1)
    return params, np.array(losses), float((pred == y).mean())


def blobs(n, d, classes, spread, seed=7):
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % classes).astype(np.int32)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[np.arange(n), y % d] += spread
    return x, y


def train(client, x, y, params, gpus=1, b64=False):
    j = client.run("train_mlp", params, {"x": tensor(x, b64), "y": tensor(y, b64)},
                   resources={"backend": "cpu", "gpus": gpus}, timeout=60)
    r = client.result(j["id"], "b64")
    assert r.status_code == 200, r.text
    body = r.json()
    out = {k: decode(v) for k, v in body["outputs"].items()}
    assert set(out) == {"w1", "b1", "w2", "b2", "loss", "accuracy"}
    assert all(v.dtype == np.float32 for v in out.values())
    return out, body.get("info") or {}


@pytest.mark.parametrize("gpus", [1, 3])
def test_train_mlp_matches_numpy_trainer(A, gpus):
    x, y = blobs(120, 4, 3, 1.5)
    hp = dict(hidden=8, classes=3, epochs=3, batch_size=16, lr=0.1, momentum=0.9,
              seed=12345678901)  # 120 rows in batches of 16: the last has 8
    out, info = train(A, x, y, hp, gpus=gpus, b64=gpus == 1)
    (w1, b1, w2, b2), losses, acc = numpy_train(
        x, y, 8, 3, 3, 16, 0.1, 0.9, 12345678901, world=gpus)
    assert out["w1"].shape == (4, 8) and out["w2"].shape == (8, 3)
    assert out["b1"].shape == (8,) and out["b2"].shape == (3,)
    for name, want in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
        np.testing.assert_allclose(out[name], want, rtol=1e-3, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(out["loss"], losses, rtol=1e-4, atol=1e-6)
    assert out["accuracy"].shape == (1,)
    assert abs(float(out["accuracy"][0]) - acc) <= 1.0 / 120
    assert str(info.get("ranks")) == str(gpus), info


def test_train_mlp_learns_separable_blobs(A):
    x, y = blobs(600, 6, 3, 4.0)
    out, _ = train(A, x, y, dict(hidden=32, classes=3, epochs=6, batch_size=32, lr=0.05,
                                 momentum=0.9, seed=1))
    loss = out["loss"]
    assert loss.shape == (6,)
    assert float(out["accuracy"][0]) > 0.95, out["accuracy"]
    assert loss[-1] < 0.5 * loss[0], loss
    assert np.all(np.diff(loss) < 0.05 * loss[:-1]), loss


def test_train_mlp_three_ranks_walk_their_own_uneven_shards(A):
    # 301 rows: shards of 100, 100, 101; 14 rows a rank a step, the last
    # step of 2, 2 and 3 rows.
    x, y = blobs(301, 5, 4, 3.0, seed=3)
    hp = dict(hidden=16, classes=4, epochs=4, batch_size=40, lr=0.05, momentum=0.9, seed=9)
    three, _ = train(A, x, y, hp, gpus=3)
    (w1, b1, w2, b2), losses, acc = numpy_train(x, y, 16, 4, 4, 40, 0.05, 0.9, 9, world=3)
    for name, want in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
        np.testing.assert_allclose(three[name], want, rtol=1e-3, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(three["loss"], losses, rtol=1e-4, atol=1e-6)
    assert abs(float(three["accuracy"][0]) - acc) <= 1 / 301


def test_train_mlp_same_seed_same_bits(A):
    x, y = blobs(64, 3, 2, 2.0)
    hp = dict(hidden=8, classes=2, epochs=2, batch_size=8, lr=0.1, momentum=0.5, seed=4)
    a, _ = train(A, x, y, hp)
    b, _ = train(A, x, y, hp)
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_train_mlp_in_catalog_with_limits(A):
    r = A.get("/v1/kernels")
    assert r.status_code == 200, r.text
    k = {k["name"]: k for k in r.json()["kernels"]}["train_mlp"]
    params = {p["name"]: p for p in k["params"]}
    assert list(params) == ["hidden", "classes", "epochs", "batch_size", "lr", "momentum", "seed"]
    assert params["hidden"]["minimum"] == 1 and params["hidden"]["maximum"] == 4096
    assert params["classes"]["minimum"] == 2 and params["classes"]["maximum"] == 1024
    assert params["classes"]["required"]
    assert params["epochs"]["minimum"] == 1 and params["epochs"]["maximum"] == 1000
    assert params["momentum"]["minimum"] == 0 and params["momentum"]["maximum"] == 1
    assert [i["name"] for i in k["inputs"]] == ["x", "y"]
    assert all(i["max_elements"] > 0 for i in k["inputs"])
    assert [o["name"] for o in k["outputs"]] == ["w1", "b1", "w2", "b2", "loss", "accuracy"]


X4, Y4 = blobs(10, 2, 2, 1.0)


@pytest.mark.parametrize("params,inputs,field", [
    (dict(hidden=0, classes=2), {"x": X4, "y": Y4}, "params.hidden"),
    (dict(classes=1), {"x": X4, "y": Y4}, "params.classes"),
    (dict(hidden=4), {"x": X4, "y": Y4}, "params.classes"),
    (dict(classes=2, batch_size=11), {"x": X4, "y": Y4}, "params.batch_size"),
    (dict(classes=2, lr=0), {"x": X4, "y": Y4}, "params.lr"),
    (dict(classes=2, momentum=1), {"x": X4, "y": Y4}, "params.momentum"),
    (dict(classes=2), {"x": X4, "y": Y4[:9]}, "inputs.y"),
    (dict(classes=2), {"x": X4, "y": Y4.astype(np.float32)}, "inputs.y"),
    (dict(classes=2), {"x": X4[:, 0], "y": Y4}, "inputs.x"),
], ids=["hidden_0", "classes_1", "classes_missing", "batch_over_n", "lr_0", "momentum_1",
        "y_short", "y_float", "x_rank_1"])
def test_train_mlp_refuses_bad_request_naming_the_field(A, params, inputs, field):
    body = {"kernel": "train_mlp", "params": params,
            "inputs": {k: tensor(v) for k, v in inputs.items()}}
    r = A.post_job(body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_argument" and err["field"] == field, err
    assert field in err["message"], err


def test_train_mlp_label_out_of_range_fails_on_inputs_y(A):
    x, y = blobs(10, 2, 2, 1.0)
    y[6] = 2
    j = A.submit("train_mlp", {"classes": 2, "batch_size": 5},
                 {"x": tensor(x), "y": tensor(y)}, resources={"backend": "cpu"})
    j = A.wait(j["id"], 30)
    assert j["state"] == "failed", j
    assert j["error"]["code"] == "invalid_argument", j["error"]
    # A failed job's error carries code and message; the message names the field.
    assert j["error"]["message"].startswith("inputs.y[6] is 2"), j["error"]
    assert j["attempts"] == 1, "a bad label is final: no retry"
