"""Diagnosis of a job: who waits for whom (:mod:`.waits`), the time ledger per rank and
iteration (:mod:`.ledger`), stragglers found by comparing identical work
(:mod:`.stragglers`)."""
