"""Linked context: grouping message units into conversations, and scoring a grouping.

A pure library (no pipeline, no Dagster), in modules imported on their own so that reading
messages does not load the model's dependencies:

- :mod:`.messages`: the :class:`~.messages.Message` record grouping reads;
- :mod:`.conversations`: :func:`~.conversations.group_conversations` (and the channel-wide
  five-minute baseline), over the links :mod:`.model` scores from the :mod:`.features`
  (topic similarity in :mod:`.topic`);
- :mod:`.scoring` and :mod:`.clusters`: the irc-disentanglement measures and clusters files;
- :mod:`.irc`: its log layout.
"""
