"""Matplotlib helpers for the notebooks' closing charts (both editions)."""


def set_figsize(figsize=(5.0, 3.0)):
    """Set the default figure size in inches for the inline backend (book 3.1)."""
    import matplotlib.pyplot as plt
    plt.rcParams['figure.figsize'] = figsize


def bar_chart(labels, values, ylabel, title=None, fmt='{:.3g}', ax=None):
    """Draw a labelled bar chart of measured values and return the Axes.

    Args:
        labels (list of str): one per bar.
        values (list of float): bar heights, in the unit named by ``ylabel``.
        ylabel (str): axis label with its unit, e.g. ``'seconds'``.
        title (str or None): chart title.
        fmt (str): format of the number printed on each bar.
        ax (matplotlib Axes or None): draw into this Axes (new figure if None).

    Raises:
        ValueError: ``labels`` and ``values`` differ in length or are empty.
    """
    import matplotlib.pyplot as plt
    if len(labels) != len(values) or not labels:
        raise ValueError(f'bar_chart: {len(labels)} labels for {len(values)} values; '
                         'give one label per value (at least one)')
    if ax is None:
        _, ax = plt.subplots()
    bars = ax.bar(range(len(values)), values, color='tab:blue')
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    for bar, value in zip(bars, values):
        ax.annotate(fmt.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha='center', va='bottom')
    return ax
