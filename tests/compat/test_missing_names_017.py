"""0.17.1's remaining public names: ResNet-18's blocks, EfficientNet's tables, the per-image
augmentations of `augmenters.barlow` and `augmenters.simclr`, and `BN_EPSILON`."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.architectures import efficientnet, resnet18
from tensorflow_similarity.augmenters import barlow, simclr
from tensorflow_similarity.models import contrastive_model

# 0.17.1's ResNet18Sim((32, 32, 3), 128) has 11,248,448 parameters (migration guide); less
# its Dense(128) head on 512 features, the backbone has 11,182,784.
RESNET18_017_BACKBONE_PARAMS = 11_248_448 - (512 * 128 + 128)


def test_stack_fn_on_0_17s_stem_is_0_17s_resnet18():
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(64, 3, padding="same", use_bias=False, name="conv1_conv")(inputs)
    x = keras.layers.BatchNormalization(epsilon=1.001e-5, name="conv1_bn")(x)
    x = keras.layers.Activation("relu", name="conv1_relu")(x)
    model = keras.Model(inputs, resnet18.stack_fn(x))

    assert model.count_params() == RESNET18_017_BACKBONE_PARAMS
    reference = resnet18.build_resnet((32, 32, 3))
    names = [layer.name for layer in model.layers[1:]]  # after the input layer
    assert names == [layer.name for layer in reference.layers[1:]]
    assert model.output.shape == (None, 4, 4, 512)


def test_block0_without_conv_shortcut_adds_its_input():
    inputs = keras.Input((8, 8, 16))
    outputs = resnet18.block0(inputs, 16, conv_shortcut=False, name="b")
    model = keras.Model(inputs, outputs)
    names = {layer.name for layer in model.layers}

    assert "b_0_conv" not in names and {"b_1_conv", "b_2_conv", "b_add", "b_out"} <= names
    # Two 3x3x16x16 convolutions and two batch norms (4 x 16 each).
    assert model.count_params() == 2 * 3 * 3 * 16 * 16 + 2 * 4 * 16
    shortcut = keras.Model(inputs, resnet18.stack0(inputs, 32, 2, name="s"))
    assert shortcut.get_layer("s_block1_0_conv").strides == (2, 2)
    assert shortcut.output.shape == (None, 4, 4, 32)


def test_efficientnet_tables():
    assert efficientnet.EFF_INPUT_SIZE == {
        "B0": 224,
        "B1": 240,
        "B2": 260,
        "B3": 300,
        "B4": 380,
        "B5": 456,
        "B6": 528,
        "B7": 600,
    }
    assert efficientnet.EFF_ARCHITECTURE["B0"] is keras.applications.EfficientNetB0
    assert efficientnet.EFF_ARCHITECTURE["B7"] is keras.applications.EfficientNetB7


def test_bn_epsilon():
    assert contrastive_model.BN_EPSILON == 1.001e-5


def _image(size=40, seed=0):
    return tf.random.stateless_uniform((size, size, 3), seed=[seed, 1])


def test_simclr_eval_augmentation_is_a_centre_crop():
    image = _image()

    # 0.8 of 40 is 32: the centre 32x32, resized to its own size.
    cropped = simclr.simclr_eval_augmentation(image, 32, 32, crop_proportion=0.8)

    np.testing.assert_allclose(cropped.numpy(), image.numpy()[4:36, 4:36], atol=1e-6)
    same = simclr.simclr_eval_augmentation(image * 2.0, 40, 40, crop=False)
    np.testing.assert_array_equal(same.numpy(), np.clip(image.numpy() * 2.0, 0, 1))


def test_simclr_training_augmentation_shape_range_and_no_op():
    tf.random.set_seed(0)
    image = _image()

    view = simclr.simclr_training_augmentation(image, 24, 24)
    untouched = simclr.simclr_training_augmentation(
        image, 40, 40, color_distort=False, crop=False, flip=False
    )

    assert view.shape == (24, 24, 3)
    assert 0.0 <= float(tf.reduce_min(view)) and float(tf.reduce_max(view)) <= 1.0
    np.testing.assert_array_equal(untouched.numpy(), image.numpy())


def test_augment_barlow_one_view_of_one_image():
    tf.random.set_seed(0)
    image = _image()

    view = barlow.augment_barlow(image, 24, 16)

    assert view.shape == (24, 16, 3)
    assert 0.0 <= float(tf.reduce_min(view)) and float(tf.reduce_max(view)) <= 1.0
    with pytest.raises(ValueError, match="one \\[height, width, channels\\] image"):
        barlow.augment_barlow(image[None], 24, 16)
