"""Place, the last step of an admission: the Placement a Pod is patched with, and what it is told. Pure."""

from __future__ import annotations

from ..catalog.model import GpuClass
from ..catalog.profiles import profile_suffix
from ..view.pods import TYPES_ANNOTATION, split_types
from .ask import PodAsk
from .decision import Decision, Placement
from .fit import Fitted
from .need import Asked
from .order import Ordered
from .route import Route
from .words import short


def place(ask: PodAsk, gpu_class: GpuClass, asked: Asked, routed: Route, fitted: Fitted,
          ordered: Ordered) -> Decision:
    """The Pod placed on the fit's types, in the fit's order, by the scheduler of its route."""
    fit = fitted.fit
    assert fit.resource is not None  # a fit some type satisfies has chosen one
    # the strict scheduler's profile scores the resource the Pod is placed on (route.route_scheduler)
    scheduler = routed.target if routed.strict is None else routed.strict + profile_suffix(gpu_class.strategy,
                                                                                             fit.resource)
    placement = Placement(
        container_index=asked.gpus.container.index,
        container_name=asked.gpus.container.name,
        count=asked.gpus.gpus.count,
        set_limit=asked.gpus.gpus.set_limit,
        class_name=gpu_class.name,
        types=fit.types,
        required=fit.required,
        preferences=ordered.preferences,
        tolerations=fit.tolerations,
        scheduler_name=scheduler,
        record_class=ask.class_name is None,  # a default's: written, so the extender sees the strategy
        resource=fit.resource,
        group=fitted.group,
        max_wait=routed.wait,
        drop_max_wait=routed.wait is None and ask.max_wait is not None,
        avoid_hosts=fit.avoid_hosts,
    )
    warnings = asked.ignored
    if ask.types_written is not None and split_types(ask.types_written) != fit.types:
        warnings += (short(f"gpu-class: {TYPES_ANNOTATION} is written by gpu-class: the Pod's value was replaced"),)
    if routed.not_kept is not None:
        warnings += (short(routed.not_kept),)
    return Decision("patched", class_name=gpu_class.name, placement=placement, warnings=ordered.warnings + warnings,
                    verdicts=fit.verdicts, resource=fit.resource, resource_notes=fit.resource_notes,
                    group=fitted.group)
