"""Bytes -> scanned columns -> correlation and CPU-context joins, in bounded memory: the
streaming parse core. It knows the Kineto format, not training semantics (those are
:mod:`traceviz.classify`'s); :mod:`traceviz.ingest.build` joins the two. (The public function
that parses one trace into its table is :func:`traceviz.parse_table`: ``traceviz.parse``
is this package.)"""
