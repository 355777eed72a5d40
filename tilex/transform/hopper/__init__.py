"""Hopper (sm_90a) passes: warp specialization, its role split and barriers, persistent grids, clusters, stream-K.

In pipeline order:

* :mod:`.ws_decision`: whether a pipelined loop is warp-specialized (decided once, before any loop is built);
* :mod:`.ws_loops`: the producer (TMA + mbarriers) and consumer (wgmma) loops of such a loop, at tile level;
* :mod:`.warp_specialize`: the block split into a producer warpgroup and the consumer warpgroups, with the
  register split;
* :mod:`.persistent`: a persistent grid walking the output tiles (with :mod:`.clusters` for TMA multicast in
  clusters of blocks and :mod:`.stream_k` for stream-K);
* among TVM's passes: :mod:`.roles` (UnfoldRoles before ThreadSync, NamedBarriers after it) and
  :mod:`.bulk_store_waits` (TMA stores' shared-memory reads finish before barriers).
"""
