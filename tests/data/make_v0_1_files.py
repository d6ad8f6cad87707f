"""Writes tests/data/*_v0_1.keras and outputs_v0_1.npz (run once, at
commit 1726e05, from the repository root under the TensorFlow backend:
`python tests/data/make_v0_1_files.py`); kept to show how the files of
tests/test_saved_files.py were made. Importing it (pytest's
`--doctest-modules` imports every module under tests/) does nothing."""

import sys


def main():
    sys.path.insert(0, "tests")
    import keras
    import numpy as np
    from models import all_blocks_inputs
    from models import all_blocks_model

    import cvattn_keras as cvk

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    blocks = all_blocks_model()
    inputs = all_blocks_inputs(rng)
    out = blocks.predict(inputs, verbose=0)
    blocks.save("tests/data/all_blocks_v0_1.keras")
    clf = cvk.models.music_classifier(
        frames=8,
        notes=4,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 2),
        frontend_kernel_sizes=(3, 3),
        stft=cvk.layers.ComplexSTFT(64, 16, bins=(0, 32)),
    )
    wave = rng.standard_normal((2, clf.input_shape[1])).astype("float32")
    clf_out = clf.predict(wave, verbose=0)
    clf.save("tests/data/music_classifier_v0_1.keras")
    np.savez(
        "tests/data/outputs_v0_1.npz",
        **{f"blocks_in_{i}": a for i, a in enumerate(inputs)},
        blocks_out=out,
        clf_in=wave,
        clf_out=clf_out,
    )


if __name__ == "__main__":
    main()
