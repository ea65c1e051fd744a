"""The training-loss curves both notebooks 05 analyse (d2lzh.curves, 8.4 exercise 1)."""
import numpy as np

from d2lzh.curves import loss_crossings, smooth_loss


def test_smoothing_counts_images_at_the_end_of_each_window():
    images, losses = smooth_loss({'loss': [1.0, 2.0, 3.0, 4.0], 'batch_size': 256}, k=2)
    assert list(images) == [512, 768, 1024] and np.allclose(losses, [1.5, 2.5, 3.5])
    images, losses = smooth_loss({'loss': [2.0, 4.0], 'batch_size': 100}, k=10)  # too short
    assert list(images) == [100, 200] and list(losses) == [2.0, 4.0]


def test_crossings_find_the_plateau_end_the_rebound_and_the_second_descent():
    flat, low, high = [2.3] * 4, [2.0] * 4, [2.4] * 4
    h = {'loss': flat + low + high + low, 'batch_size': 10}
    # windows of 2: (2.3, 2.0) ends at minibatch 5, (2.4, 2.4) at 10, (2.0, 2.0) at 14
    assert loss_crossings(h, k=2) == (50, 100, 140)
    assert loss_crossings({'loss': flat + low, 'batch_size': 10}, k=2) == (50, None, None)
    assert loss_crossings({'loss': flat, 'batch_size': 10}, k=2) == (None, None, None)
