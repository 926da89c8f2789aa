"""Linked context: grouping message units into conversations, questions with their answers,
incidents with their shift notes and days at a place; scoring a grouping; re-processing.

A pure library (no pipeline, no Dagster), in modules imported on their own so that reading
messages does not load the model's dependencies:

- :mod:`.messages`: the :class:`~.messages.Message` record grouping reads;
- :mod:`.records`: the :class:`~.records.Group` and :class:`~.records.Member` records;
- :mod:`.groups`: :func:`~.groups.link_units`, every group of a collection, described;
- :mod:`.conversations`: :func:`~.conversations.group_conversations` (and the channel-wide
  five-minute baseline), over the links :mod:`.model` scores from the :mod:`.features`
  (time in the channel's pace; topic similarity in :mod:`.topic`); :mod:`.merging`, a second
  look that joins conversations of one channel on people, topic and time (measured, not in
  the pipeline);
- :mod:`.questions`, :mod:`.incidents`, :mod:`.days`, :mod:`.decisions`, :mod:`.topics`:
  questions and answers, incident contexts, daily contexts, decision threads, topic clusters; :mod:`.people` (who, through an identity registry or as written),
  :mod:`.similarity` (TF-IDF over the collection), :mod:`.describe` and :mod:`.tags` (titles,
  summaries, anchors, tags);
- :mod:`.group_input`: the ``group-v1`` text a group is embedded from;
- :mod:`.reprocess`: the temporal re-processing queue;
- :mod:`.scoring` and :mod:`.clusters`: the irc-disentanglement measures and clusters files;
- :mod:`.irc`: its log layout.
"""
