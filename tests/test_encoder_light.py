"""The ONNX variants with an exported graph encode through the light tokenizer (``tokenizers``,
ONNX Runtime, numpy; no sentence-transformers, transformers or torch import) and give the same
vectors, bit for bit, as the full path through the ``SentenceTransformer``: real MiniLM, real
export, real cranfield and scifact documents, texts longer than the model's 256 tokens."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from limelight.data import load_dataset
from limelight.retrieval import encoders
from limelight.retrieval.dense import Encoder

EDGE = ["", " ", "x", "  leading and trailing spaces  ", "Ünïcödé àccents, ß and ﬁ ligatures",
        "中文 text with 漢字 and emoji 🙂", "tabs\tand\nnewlines\r\n", "[CLS] [SEP] [PAD] [MASK]",
        "word " * 600, "supercalifragilisticexpialidocious " * 300]


class FullEncoder(Encoder):
    """The encoder as it was: the ``SentenceTransformer`` loaded, its ``preprocess`` tokenizes."""

    light = False


@pytest.fixture(scope="module")
def texts():
    """Real documents (cranfield, scifact: several longer than 256 tokens) and edge cases."""
    docs = load_dataset("cranfield").collection.texts.tolist()[:60]
    sci = load_dataset("scifact").collection.texts.tolist()
    longest = sorted(sci, key=len)[-20:]
    return [str(t) for t in docs + sci[:60] + longest] + EDGE


@pytest.mark.parametrize("variant", ["onnx-int8", "onnx"])
def test_light_path_equals_full_path(variant, texts):
    full = FullEncoder(variant=variant)  # exports into the model cache on first use
    light = Encoder(variant=variant)
    assert full._tokenizer is None and isinstance(light._tokenizer, encoders.LightTokenizer)
    assert light.identity() == full.identity() and light.fingerprint == full.fingerprint
    # the same token ids, truncated at the same length, for every text
    names = light._backend.input_names
    got, want = light._tokenizer.preprocess(texts), full.model.preprocess(texts)
    for k in names:
        assert np.array_equal(got[k], np.asarray(want[k])), k
    n_tokens = np.asarray(want["attention_mask"]).sum(1)
    assert n_tokens.max() == full.max_seq_length == 256 and (n_tokens == 256).sum() >= 10
    a, b = light.encode(texts), full.encode(texts)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (len(texts), 384)
    assert np.abs(a - b).max() == 0.0


def test_light_path_shorter_max_seq_length_and_truncate_dim(texts):
    full = FullEncoder(variant="onnx-int8", max_seq_length=64, truncate_dim=128)
    light = Encoder(variant="onnx-int8", max_seq_length=64, truncate_dim=128)
    assert isinstance(light._tokenizer, encoders.LightTokenizer)
    assert light.identity() == full.identity() and light.dim == 128
    assert np.abs(light.encode(texts) - full.encode(texts)).max() == 0.0
    assert light.model.max_seq_length == 64  # the SentenceTransformer still loads on demand


def test_export_folder_found_without_torch():
    """The folder named with the installed packages' versions (their metadata) is the one the
    export wrote, and the one earlier releases named with the versions the imported packages
    report (same key: exports, indexes and caches made before stay valid)."""
    import onnxruntime
    import torch
    import transformers

    enc = Encoder(variant="onnx-int8")
    imported = {"torch": torch.__version__, "transformers": transformers.__version__,
                "onnxruntime": onnxruntime.__version__, "recipe": str(encoders.RECIPE)}
    assert encoders._versions() == imported
    assert encoders.export_dir(enc.fingerprint, "onnx-int8", versions=imported) == \
        encoders.export_dir(enc.fingerprint, "onnx-int8")
    assert encoders.cached_export(enc.fingerprint, "onnx-int8") == enc._backend.path


def test_fresh_process_does_not_import_torch(texts):
    """A fresh process opening the default encoder and encoding imports neither
    sentence-transformers, transformers nor torch, and gets the full path's vectors."""
    Encoder()  # the export exists (made by the full path if the cache was empty)
    code = (
        "import json, sys\n"
        "import numpy as np\n"
        "from limelight.retrieval.dense import Encoder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "v = Encoder().encode(texts)\n"
        "heavy = [m for m in ('sentence_transformers', 'transformers', 'torch') if m in sys.modules]\n"
        "print(json.dumps({'heavy': heavy, 'v': v.tolist()}))\n")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts[:30] + EDGE),
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["heavy"] == []
    want = FullEncoder().encode(texts[:30] + EDGE)
    assert np.abs(np.asarray(got["v"], dtype=np.float32) - want).max() == 0.0
