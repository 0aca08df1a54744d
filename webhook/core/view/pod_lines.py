"""Which Pod watch events can change the GPU view, judged from the raw line before it is decoded.

Every worker watches every unfinished Pod of the cluster, and most of them are not about GPUs (CPU
services, batch, CI). Decoding each event in full cost a worker more than a third of its samples in a busy
cluster, holding the GIL while admissions waited. A Pod event can change the view only when

- the Pod asks for a resource of the catalog (a type's resource, a MIG slice's): what pod_gpu_requests and
  unbound_gpu_pod read, from its containers' limits and requests, or
- the view holds the Pod already (bound with GPUs, or known unbound), whatever the event says of it now:
  it may be deleted, finish, or (were the API to allow it) lose its GPUs; the view must forget it then.

A line is skipped only when it proves neither: it has the exact shape the API server writes (the event
type, then the Pod's kind, apiVersion and the leading fields of its metadata, name, namespace, uid and
resourceVersion among them, in Go's field order), the Pod (namespace/name) is not one the view holds, and no
resource name of the catalog appears anywhere in the line. Anything else is decoded: BOOKMARK and ERROR events, a line of
another shape, a name written with escapes. A false positive (a Pod that names a GPU resource in an
annotation, an env var or a node selector) costs one decode; a false negative would lose an event, so
every test for "can matter" errs towards decoding.

Why the literal search is sound: a Pod's limits and requests are JSON keys, and the API server's encoder
(Go's encoding/json) writes a key's ASCII letters, digits, '.', '-', '_' and '/' as themselves: it escapes
only '"', '\\', control characters, '<', '>', '&', U+2028, U+2029 and invalid UTF-8. So a Pod that asks
for nvidia.com/gpu has the bytes "nvidia.com/ in its line. The search is for each resource's domain
("nvidia.com/, "amd.com/): one scan per domain instead of one per resource (the catalog has 22, most of
them MIG profiles), at the price of decoding the few non-GPU Pods that name a label of the domain.

Pure: bytes and sets in, an answer out; the watch (cluster/pods_watch.py) keeps the set of Pods the view holds.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Iterable

# The head of a Pod event as the API server writes it. Names and namespaces never hold '"' or '\\', uids and
# resourceVersions are printable ASCII; a head that is not matched is decoded.
_POD_EVENT_HEAD = re.compile(
    rb'\{"type":"(?:ADDED|MODIFIED|DELETED)","object":\{"kind":"Pod","apiVersion":"v1","metadata":\{'
    rb'"name":"([^"\\]*)",(?:"generateName":"[^"\\]*",)?"namespace":"([^"\\]*)",(?:"selfLink":"[^"\\]*",)?'
    rb'"uid":"[!#-\[\]-~]+","resourceVersion":"([!#-\[\]-~]+)"'
)


def resource_needles(resources: Iterable[str]) -> tuple[bytes, ...]:
    """What to look for in a line: each resource's domain with its opening quote and the slash
    ('"nvidia.com/'), or the whole quoted name of a resource without a domain ('"gpu"'), once each."""
    needles: dict[bytes, None] = {}
    for resource in resources:
        domain, slash, _ = resource.partition("/")
        needles[b'"' + (domain + slash if slash else resource + '"').encode()] = None
    return tuple(needles)


def skipped_pod_event(line: bytes, needles: tuple[bytes, ...], held: AbstractSet[str]) -> str | None:
    """The resourceVersion of a Pod event that cannot change the GPU view, read from its raw watch line;
    None when the line must be decoded (it may matter, or is not a Pod event of the expected shape).
    `held`: the namespace/name of each Pod the view holds."""
    head = _POD_EVENT_HEAD.match(line)
    if head is None:
        return None
    name, namespace, resource_version = head.group(1, 2, 3)
    try:
        key = (namespace + b"/" + name).decode()
    except UnicodeDecodeError:  # decoded with replacement characters, the key would not be the one held
        return None
    if key in held:
        return None
    for needle in needles:
        if needle in line:
            return None
    return resource_version.decode("ascii")
