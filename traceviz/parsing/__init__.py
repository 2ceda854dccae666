"""Bytes -> scanned columns -> correlation and CPU-context joins, in bounded memory: the
streaming parse core. It knows the Kineto format, not training semantics (those are
:mod:`traceviz.classify`'s); :mod:`traceviz.ingest.build` joins the two. (Named
``parsing`` so that it never shadows the public :func:`traceviz.parse`.)"""
