"""SSD320's anchors, box coder, matcher, focal loss and NMS against the reference values and
straightforward numpy versions written here."""
import numpy as np
import pytest
import tensorflow as tf

from ssd import anchors, box_coder, losses, postprocess, targets

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def test_anchor_count_and_first_p3_anchors_match_tf_od():
    a = anchors.generate(320)
    assert a.shape == (12_804, 4)
    per_level = [anchors.level_anchors(320, level).shape[0] for level in range(3, 8)]
    assert per_level == [9600, 2400, 600, 150, 54]
    first = a[:6] * 320  # pixels, aspect-ratio-major then scale
    expected = [[-12, -12, 20, 20], [-18.63, -18.63, 26.63, 26.63], [-7.31, -18.63, 15.31, 26.63],
                [-12, -28, 20, 36], [-18.63, -7.31, 26.63, 15.31], [-28, -12, 36, 20]]
    np.testing.assert_allclose(first, expected, atol=0.01)
    p7 = anchors.level_anchors(320, 7)  # 320 % 128 != 0: no half-stride offset
    centres = np.unique(((p7[:, 0] + p7[:, 2]) / 2).round(3))
    np.testing.assert_allclose(centres, [0, 128, 256])


def test_box_codes_round_trip_and_use_scales_10_10_5_5():
    rng = np.random.default_rng(0)
    anc = anchors.generate(320)[::97]
    yx = rng.uniform(0, 0.8, (len(anc), 2))
    boxes = np.concatenate([yx, yx + rng.uniform(0.01, 0.2, (len(anc), 2))], -1).astype(np.float32)
    codes = box_coder.encode(boxes, anc)
    np.testing.assert_allclose(box_coder.decode(codes, anc), boxes, atol=1e-5)
    # One worked case: a box twice an anchor's size, shifted by half its height.
    anchor, box = np.array([[0.2, 0.2, 0.4, 0.4]]), np.array([[0.2, 0.1, 0.6, 0.5]])
    np.testing.assert_allclose(box_coder.encode(box, anchor), [[10 * 0.1 / 0.2, 0, 5 * np.log(2),
                                                                5 * np.log(2)]], atol=1e-5)


def test_matcher_thresholds_forced_matches_and_padding():
    anc = tf.constant([[0, 0, 1, 1], [0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1], [0, 0, 0.2, 0.2]],
                      tf.float32)
    gt = tf.constant([[0, 0, 0.5, 0.5],      # IoU 1 with anchor 1
                      [0.6, 0.6, 0.9, 0.9],  # best anchor 2, IoU 0.36: forced
                      [0, 0, 0.1, 0.1],      # best anchor 3 (IoU 0.25): forced
                      [0, 0, 1, 1]], tf.float32)  # padding: must not match anchor 0
    m = targets.match(gt, 3, anc).numpy()
    assert list(m) == [-1, 0, 1, 2]
    m = targets.match(gt, 4, anc).numpy()
    assert list(m) == [3, 0, 1, 2]  # the same box, now real, matches anchor 0 at IoU 1
    # Two boxes whose best anchor is the same: the first box wins it.
    both = tf.constant([[0.6, 0.6, 0.9, 0.9], [0.55, 0.55, 0.95, 0.95]], tf.float32)
    assert list(targets.match(both, 2, anc).numpy()) == [-1, -1, 0, -1]
    # IoU exactly 0.5 is a match.
    half = tf.constant([[0, 0, 0.5, 0.25]], tf.float32)  # IoU 0.5 with anchor 1
    assert targets.match(half, 1, anc).numpy()[1] == 0
    classes, codes = targets.encode_targets(gt, tf.constant([3, 7, 1, 9]), 3, anc)
    assert list(classes.numpy()) == [0, 3, 7, 1]
    assert not codes.numpy()[0].any()


def test_focal_loss_equals_the_numpy_formula():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 3, (4, 50, 6)).astype(np.float32)
    labels = (rng.uniform(size=logits.shape) < 0.1).astype(np.float32)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    ce = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    p_t = labels * p + (1 - labels) * (1 - p)
    expected = (1 - p_t) ** 2 * (labels * 0.25 + (1 - labels) * 0.75) * ce
    np.testing.assert_allclose(losses.focal_loss(labels, logits), expected, rtol=1e-4, atol=1e-6)


def test_detection_loss_normalises_by_matches_and_ignores_background_column():
    logits = tf.zeros((1, 3, 3))
    cls, codes = tf.constant([[0, 2, 1]]), tf.constant([[[0.0] * 4, [1.0] * 4, [3.0] * 4]])
    total, c, loc, n = losses.detection_loss(logits, tf.zeros((1, 3, 4)), cls, codes)
    assert float(n) == 2
    per = np.log(2) * 0.25  # p = 0.5 everywhere: (1 - p_t)^2 * log 2
    pos, neg = per * 0.25, per * 0.75  # alpha 0.25 on the 2 positives, 0.75 on the 7 others
    np.testing.assert_allclose(float(c), (2 * pos + 7 * neg) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(loc), (4 * 0.5 + 4 * 2.5) / (4 * 2), rtol=1e-6)


def _nms_reference(boxes, scores, iou_thr, max_per_class, max_total, score_thr):
    def iou(a, b):
        ih = max(0, min(a[2], b[2]) - max(a[0], b[0]))
        iw = max(0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = ih * iw
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0
    kept = []
    for c in range(scores.shape[1]):
        order = [i for i in np.argsort(-scores[:, c], kind="stable") if scores[i, c] > score_thr]
        chosen = []
        for i in order:
            if all(iou(boxes[i], boxes[j]) <= iou_thr for j in chosen):
                chosen.append(i)
            if len(chosen) == max_per_class:
                break
        kept += [(scores[i, c], c + 1, tuple(boxes[i])) for i in chosen]
    kept.sort(key=lambda k: -k[0])
    return kept[:max_total]


@pytest.mark.parametrize("on_device", [False, True], ids=["kernel", "device"])
def test_nms_equals_a_brute_force_reference(on_device):
    rng = np.random.default_rng(2)
    anc = anchors.generate(64)  # 6 * (8*8 + 4*4 + 2*2 + 1 + 1) = 516 anchors
    logits = rng.normal(-2, 2, (1, len(anc), 4)).astype(np.float32)
    codes = rng.normal(0, 1, (1, len(anc), 4)).astype(np.float32)
    out = postprocess.detect(logits, codes, anc, max_per_class=20, max_total=30,
                             on_device=on_device)
    boxes = np.clip(box_coder.decode(codes[0], anc).numpy(), 0, 1)
    scores = 1 / (1 + np.exp(-logits[0, :, 1:].astype(np.float64)))
    ref = _nms_reference(boxes, scores, 0.6, 20, 30, 1e-8)
    n = int(out["num_detections"][0])
    assert n == len(ref) == 30
    np.testing.assert_allclose(out["scores"][0, :n], [r[0] for r in ref], rtol=1e-5)
    assert list(out["classes"][0, :n].numpy()) == [r[1] for r in ref]
    np.testing.assert_allclose(out["boxes"][0, :n], [r[2] for r in ref], atol=1e-5)


def test_the_cut_before_nms_keeps_the_detections_of_the_full_nms():
    """Each image's 1,000 best (anchor, class) scores, through the device's NMS, give the same
    100 detections as TF-OD's NMS kernel (the exports') over all of them (SSD320's 12,804
    anchors x 90 classes), on scores spread as an untrained model's and as a trained one's
    (a few confident objects over a sea of background)."""
    rng = np.random.default_rng(0)
    anc = anchors.generate(320)
    a = len(anc)
    untrained = rng.normal(-4, 1, (2, a, 91)).astype(np.float32)
    trained = rng.normal(-9, 2, (2, a, 91)).astype(np.float32)
    objects = rng.choice(a, 40)  # 40 anchors, as many objects' best, very confident
    trained[:, objects, rng.integers(1, 91, 40)] = 6.0
    for logits in (untrained, trained):
        codes = rng.normal(0, 0.5, (2, a, 4)).astype(np.float32)
        cut = postprocess.detect(logits, codes, anc, on_device=True)
        full = postprocess.nms(*postprocess.top_candidates(
            *postprocess.decode(logits, codes, anc), k=a * 90))
        _assert_same_detections(cut, full)


@pytest.mark.parametrize("max_per_class", [100, 3])
def test_the_devices_nms_equals_tf_ods_kernel(max_per_class):
    """greedy_nms (evaluation's, on the device) keeps what combined_non_max_suppression (the
    exports') keeps, in its order: crowded boxes of few classes, so that NMS suppresses, and
    with a per-class cap that binds."""
    rng = np.random.default_rng(5)
    b, k, c = 3, 400, 4
    centre = rng.uniform(0.3, 0.7, (b, k, 2))
    size = rng.uniform(0.05, 0.3, (b, k, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], -1).clip(0, 1).astype(
        np.float32)
    scores = rng.uniform(0, 1, (b, k)).astype(np.float32)
    scores[:, :20] = 0.0  # below the score threshold
    classes = rng.integers(0, c, (b, k)).astype(np.int64)
    device = postprocess.greedy_nms(tf.constant(boxes), tf.constant(scores),
                                    tf.constant(classes), c, max_per_class, 30)
    kernel = postprocess.nms(tf.constant(boxes), tf.one_hot(classes, c) * scores[..., None],
                             max_per_class, 30)
    _assert_same_detections(device, kernel)
    assert (device["num_detections"].numpy() == min(30, c * max_per_class)).all()


def _assert_same_detections(a, b):
    """The same detections in each image, in the same order of score; detections of equal
    score (a trained model's certain ones) may come in either order: COCO's evaluation sorts
    them by score alone."""
    np.testing.assert_array_equal(a["num_detections"].numpy(), b["num_detections"].numpy())
    def rows(d, i, n):
        return sorted(zip(np.round(d["scores"][i, :n].numpy(), 6) * -1,
                          d["classes"][i, :n].numpy(),
                          map(tuple, np.round(d["boxes"][i, :n].numpy(), 5))))
    for i, n in enumerate(a["num_detections"].numpy()):
        assert rows(a, i, n) == rows(b, i, n)
        np.testing.assert_allclose(a["scores"][i, :n].numpy(), b["scores"][i, :n].numpy(),
                                   atol=1e-6)  # in the same order of score
