"""What the webhook's certificate keeper must create or renew: a pure function of what is held and the clock.

The CA is renewed `ca_renew_before` its expiry and the old one stays in the trust bundle until it expires,
so a leaf it signed still verifies while replicas move to leaves of the new CA. Leaves move to the new CA
only `overlap` after it appeared, by when every party that reads the bundle (the API server at once, each
replica's extender listener at its next check) trusts it; a leaf is renewed `renew_before` its expiry,
when its names change, or when no CA in the bundle signed it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

# Certificates start this early (nodes' clocks differ); a CA was made this long after its not_before.
BACKDATE = datetime.timedelta(minutes=5)

Reason = Literal["absent", "expiring", "names-changed", "untrusted-issuer", "moves-to-new-ca"]


@dataclass(frozen=True)
class Policy:
    ca_validity: datetime.timedelta = datetime.timedelta(days=365)
    ca_renew_before: datetime.timedelta = datetime.timedelta(days=30)
    validity: datetime.timedelta = datetime.timedelta(days=30)
    renew_before: datetime.timedelta = datetime.timedelta(days=10)
    overlap: datetime.timedelta = datetime.timedelta(minutes=10)

    def __post_init__(self) -> None:
        if not datetime.timedelta(0) < self.ca_renew_before < self.ca_validity:
            raise ValueError("the CA's renew-before must be positive and shorter than its validity")
        if not datetime.timedelta(0) < self.renew_before < self.validity:
            raise ValueError("the certificates' renew-before must be positive and shorter than their validity")
        if not datetime.timedelta(0) < self.overlap < self.ca_renew_before:
            # the old CA must outlive the move of every leaf to the new one, or a replica is left untrusted
            raise ValueError("the overlap must be positive and shorter than the CA's renew-before")


@dataclass(frozen=True)
class CertFacts:
    """What a decision needs of one certificate: its validity and who it is (a CA) or who signed it (a leaf)."""

    not_before: datetime.datetime
    not_after: datetime.datetime
    key_id: bytes  # a CA: its subject key identifier; a leaf: its authority key identifier (its CA's)
    names: tuple[str, ...] = ()  # a serving certificate's DNS and IP names, sorted


@dataclass(frozen=True)
class Held:
    """The certificates found in the Secrets; None where a Secret, or its key, is absent or unreadable."""

    ca: CertFacts | None
    previous_ca: CertFacts | None  # the CA before it, still in the bundle
    serving: CertFacts | None
    client: CertFacts | None


@dataclass(frozen=True)
class Plan:
    new_ca: bool  # make a CA; with keep_previous, the current one stays in the bundle
    keep_previous: bool  # the bundle holds the previous CA (after a new one: the one being replaced)
    serving: Reason | None  # why the serving certificate is reissued; None: it stays
    client: Reason | None

    @property
    def is_noop(self) -> bool:
        return not self.new_ca and self.serving is None and self.client is None


def plan_rotation(held: Held, names: tuple[str, ...], now: datetime.datetime, policy: Policy) -> Plan:
    """What to do now. `names` are the serving certificate's names, sorted."""
    ca, previous = held.ca, held.previous_ca
    if ca is None or now >= ca.not_after:
        # No CA to sign with: a fresh one and leaves at once. A lost CA Secret leaves its certificate in the
        # serving Secret's bundle (previous_ca): kept, it still trusts the leaves replicas serve until they reload.
        keep = ca is None and previous is not None and now < previous.not_after
        return Plan(new_ca=True, keep_previous=keep, serving="absent" if held.serving is None else "untrusted-issuer",
                    client="absent" if held.client is None else "untrusted-issuer")
    rotating = now >= ca.not_after - policy.ca_renew_before
    if rotating:
        # the current CA becomes the previous one; the leaves it signed stay until the overlap has passed
        return Plan(new_ca=True, keep_previous=True, serving=_leaf_reason(held.serving, (), ca, None, now, policy),
                    client=_leaf_reason(held.client, (), ca, None, now, policy))
    keep = previous is not None and now < previous.not_after
    kept = previous if keep else None
    return Plan(new_ca=False, keep_previous=keep,
                serving=_leaf_reason(held.serving, names, ca, kept, now, policy, check_names=True),
                client=_leaf_reason(held.client, (), ca, kept, now, policy))


def _leaf_reason(leaf: CertFacts | None, names: tuple[str, ...], ca: CertFacts, previous: CertFacts | None,
                 now: datetime.datetime, policy: Policy, *, check_names: bool = False) -> Reason | None:
    """Why a leaf must be reissued by `ca` (the current CA), or None."""
    if leaf is None:
        return "absent"
    if now >= leaf.not_after - policy.renew_before:
        return "expiring"
    if check_names and leaf.names != names:
        return "names-changed"
    if leaf.key_id == ca.key_id:
        return None
    if previous is None or leaf.key_id != previous.key_id:
        return "untrusted-issuer"
    # counted from when the new CA was made (and so first written into the bundle), not from its backdated start
    return "moves-to-new-ca" if now >= ca.not_before + BACKDATE + policy.overlap else None
