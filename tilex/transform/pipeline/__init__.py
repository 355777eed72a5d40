"""Software pipelining of ``T.Pipelined`` loops (the InjectSoftwarePipeline pass), one module per concern.

* :mod:`.inject`: the pass: finds the pipelined loops, picks each one's schedule and rewrite, swaps in the
  multi-buffered allocations;
* :mod:`.schedule`: which schedule a loop gets (derived from the body, explicit from ``order=``/``stage=``, or
  none) and the derived plan;
* :mod:`.cp_async`: the derived schedule on cp.async, run by every thread;
* :mod:`.explicit`: explicit schedules (checked against the body's dependencies, then built on cp.async);
* :mod:`.context` / :mod:`.analysis`: what the rewrites share (multi-buffering, wgmma detection) and the
  statement analysis they use.

The warp-specialized form of the derived schedule (TMA producer / wgmma consumers) is built by
:mod:`tilex.transform.hopper.ws_loops`, when :mod:`tilex.transform.hopper.ws_decision` says it applies.
"""
