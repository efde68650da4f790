"""Your own training data without code: ``--dataset ./my_data.jsonl`` (``.json`` list, ``.csv``, ``.parquet``).

A file given as ``--dataset`` is read strictly (its suffix says the format), its layout detected --
Alpaca (``instruction`` / ``input`` / ``output``, optional ``system``, ``history``) or ShareGPT
(``conversations`` or ``messages`` holding ``from``/``value`` or ``role``/``content`` turns) -- and every
row checked (a conversation that does not end on an assistant turn; rows with an empty or non-text
question or answer are raw data the data script drops, counted in the make-up the planner reads,
:mod:`ftagent.datasets.makeup`; a file without one usable row is refused). Bad files raise
:class:`UserInputError` naming the file and the first bad row, before anything is copied. A good file is copied (never linked: the session must not change when the original does)
into ``FT_FILE_PATH/datasets/<name>/`` with:

* ``.user_dataset.json`` -- :class:`~.info.UserDataset` (origin, sha256, format, column/tag mapping);
* ``dataset_info.json`` -- the LLaMA-Factory registration of the copy (``formatting: sharegpt`` with
  its ``columns``/``tags`` for ShareGPT), so LLaMA-Factory can read the folder as it is;
* ``FTAGENT_NOTES.md`` -- what the planner is told; ``.prepared`` -- so preparation returns at once.

The name comes from the file's stem (``my_data``; ``user_<stem>`` when a built-in dataset has that
name). The same content again reuses the copy; a changed file under a name already taken gets a new
copy named ``<stem>_<sha8>`` (a resumed session keeps training on the copy it started with).

The modules, in the order a file goes through them: :mod:`.reading` (the rows, read strictly as the suffix
says), :mod:`.layout` (Alpaca or ShareGPT detected, every row checked), :mod:`.info` (the
:class:`~.info.UserDataset` record of a copy), :mod:`.folder` (the copy's folder: LLaMA-Factory registration,
notes, make-up), :mod:`.register` (copy or reuse, the names, the contamination scan, the process registry)
and :mod:`.convert` (the default converter to Alpaca rows, whose code the planner is shown).
"""
