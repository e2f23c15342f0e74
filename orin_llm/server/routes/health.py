"""GET /health and GET /metrics: answered from the moment the daemon binds, while the engine loads.

While loading, /health answers 503 with `{"status": "loading", "ready": false, "loading_s": ...}` and
Retry-After: a status that HTTP readiness checks (curl --fail, a ROS launch, a load balancer) read as
"not ready", and a body `orin-llm health` prints. If loading failed it answers `"status": "failed"`
with the error until the daemon exits (non-zero). Then 200: `"ok"`, or `"stopping"` during a
graceful stop (the body as always, with `"ready": false`).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from .state import AppState, app_state

router = APIRouter()
LOADING_RETRY_S = 1


@router.get("/health")
async def health(state: AppState = Depends(app_state)) -> Any:
    worker = state.worker
    if not state.ready:
        failed = worker is not None and worker.load_error is not None
        body = {"status": "failed" if failed else "loading", "ready": False,
                "loading_s": round(time.monotonic() - state.started, 3)}
        if failed:
            body["error"] = f"{type(worker.load_error).__name__}: {worker.load_error}"
        return JSONResponse(body, 503, headers={"Retry-After": str(LOADING_RETRY_S)})
    planner, engine, config = state.planner, state.engine, state.config
    prefix = planner.prefix
    assert prefix is not None
    kv = engine.kv_usage()
    return {  # FastAPI encodes it
        "status": "ok" if worker.accepting else "stopping", "ready": worker.accepting,
        "engine": engine.name, "backend": engine.manifest.backend,
        "device": kv["device"],
        "environment": {"name": prefix.environment.name, "version": prefix.version},
        "prefix_tokens": len(prefix.ids),
        "queue": {"depth": worker.depth, "capacity": worker.capacity,
                  "running": worker.running},
        "kv_cache": {**{k: kv[k] for k in ("tokens", "capacity_tokens", "bytes")},
                     **({"pool": kv["pool"]} if "pool" in kv else {})},
        "scheduler": scheduler_info(engine),
        # how long the engine's load took and the longest it kept the daemon's Python from running (load_meter.py)
        **({"load": worker.load_report} if getattr(worker, "load_report", None) else {}),
        # TensorRT-LLM: the executor watchdog's restarts and why (backends/trtllm/watchdog.py)
        **({"executor": kv["executor"]} if "executor" in kv else {}),
        # the torch backend's CPU fast paths: true, or why not (TensorRT-LLM's engine has its own kernels)
        **({"kernels": engine.kernels()} if engine.capabilities.kernels else {}),
        "limits": {"max_input_len": engine.manifest.limits["max_input_len"], "max_tokens": state.limit,
                   "max_body_bytes": config.max_body_bytes},
        # where histories and homes are kept, which homes came back at start and which did not (and why)
        **({"persistence": state.state_dir.report()} if state.state_dir is not None else {})}


@router.get("/metrics")
async def metrics_text(state: AppState = Depends(app_state)) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def scheduler_info(engine) -> dict:
    """How the engine batches: requests decoding together, rows per step, prompt tokens per step
    (a TensorRT-LLM engine batches inside its executor: none of these)."""
    if not engine.capabilities.tunable_batch:
        return {}
    s = engine.stats()
    return {"max_running": s.max_running, "max_step_tokens": s.max_step_tokens,
            "prefill_chunk_tokens": s.prefill_chunk_tokens, "running": s.running, "waiting": s.waiting}
