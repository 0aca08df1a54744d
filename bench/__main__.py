"""`python -m bench`: run the benchmark suite (options: `python -m bench --help`).

`python -m bench apiserver`, `python -m bench placement`, `python -m bench groups`, `python -m bench dra` and
`python -m bench faults` measure on the real control plane instead (bench/apiserver/apiserver.py,
bench/placement/placement.py, bench/groups/groups.py, bench/dra/dra.py, bench/faults/faults.py); `python -m bench
binds` times the watch's judgment of binds in-process (bench/binds/binds.py); `python -m bench live_burst` times
the live inventory through a burst of node changes (bench/live_burst/live_burst.py); `python -m bench pod_events`
times the Pod watch per event of each kind, every line decoded against the raw line checked first
(bench/pod_events/pod_events.py); `python -m bench upgrade` times one pass of the upgrader in-process
(bench/upgrade/upgrade.py); `python -m bench wait` counts what Pods waiting for their best type cost
gpu-class-scheduler on the real control plane (bench/wait/wait.py); `python -m bench churn` checks that
gpu-class-scheduler still narrows, and places right, through bursts of node changes (bench/churn/churn.py);
`python -m bench single` times single Pods one after another where the class is most of the nodes, per scheduling
path (bench/single/single.py); `python -m bench stall` times honest Pod creates while slow and oversized requests
attack the webhook, and what the tenant boundary's policy adds to a create (bench/stall/stall.py). One subpackage
per command, what they share in bench/common (bench/README.md, "Files").
"""

import sys

if sys.argv[1:2] == ["apiserver"]:
    from bench.apiserver.apiserver import main as apiserver_main

    sys.exit(apiserver_main(sys.argv[2:]))
if sys.argv[1:2] == ["placement"]:
    from bench.placement.placement import main as placement_main

    sys.exit(placement_main(sys.argv[2:]))
if sys.argv[1:2] == ["binds"]:
    from bench.binds.binds import main as binds_main

    sys.exit(binds_main(sys.argv[2:]))
if sys.argv[1:2] == ["faults"]:
    from bench.faults.faults import main as faults_main

    sys.exit(faults_main(sys.argv[2:]))
if sys.argv[1:2] == ["groups"]:
    from bench.groups.groups import main as groups_main

    sys.exit(groups_main(sys.argv[2:]))
if sys.argv[1:2] == ["live_burst"]:
    from bench.live_burst.live_burst import main as live_burst_main

    sys.exit(live_burst_main(sys.argv[2:]))
if sys.argv[1:2] == ["upgrade"]:
    from bench.upgrade.upgrade import main as upgrade_main

    sys.exit(upgrade_main(sys.argv[2:]))
if sys.argv[1:2] == ["pod_events"]:
    from bench.pod_events.pod_events import main as pod_events_main

    sys.exit(pod_events_main(sys.argv[2:]))
if sys.argv[1:2] == ["wait"]:
    from bench.wait.wait import main as wait_main

    sys.exit(wait_main(sys.argv[2:]))
if sys.argv[1:2] == ["churn"]:
    from bench.churn.churn import main as churn_main

    sys.exit(churn_main(sys.argv[2:]))
if sys.argv[1:2] == ["single"]:
    from bench.single.single import main as single_main

    sys.exit(single_main(sys.argv[2:]))
if sys.argv[1:2] == ["stall"]:
    from bench.stall.stall import main as stall_main

    sys.exit(stall_main(sys.argv[2:]))
if sys.argv[1:2] == ["dra"]:
    from bench.dra.dra import main as dra_main

    sys.exit(dra_main(sys.argv[2:]))

from bench.http.run import main

sys.exit(main())
