"""Training-loss curves (8.4, exercise 1: does a doubled batch need a doubled learning rate?):
the loss smoothed over a window of minibatches, and when it leaves the plateau near ln 10."""
import numpy as np


def smooth_loss(history, k=10):
    """(images, losses), 1-D float arrays of one length: ``history['loss']`` (a float per minibatch
    of ``history['batch_size']`` images, as ``train_data_parallel`` returns) averaged over ``k``
    minibatches (fewer than ``k``: unsmoothed); ``images[i]``: images seen when window i ends."""
    losses = np.asarray(history['loss'], dtype=float)
    k = k if len(losses) >= k else 1
    smoothed = np.convolve(losses, np.ones(k) / k, mode='valid')
    return (np.arange(len(smoothed)) + k) * float(history['batch_size']), smoothed


def loss_crossings(history, level=2.2, up=2.28, k=10):
    """(below, back_up, below_again): images seen (int) when the smoothed loss first fell
    below ``level``, when it then rose above ``up`` again, and when it next fell below
    ``level``; None for each that did not happen. ``history``, ``k``: as :func:`smooth_loss`."""
    images, losses = smooth_loss(history, k)
    found, start = [], 0
    for crossed in (losses < level, losses > up, losses < level):
        hits = np.nonzero(crossed[start:])[0]
        if len(hits) == 0:
            return tuple(found) + (None,) * (3 - len(found))
        start += hits[0]
        found.append(int(images[start]))
    return tuple(found)
