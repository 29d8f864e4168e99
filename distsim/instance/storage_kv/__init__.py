"""The storage KV tier (``cluster.engine.storage_kv``): a local drive below the CPU KV tier, as LMCache's
local disk backend (and BLIS's filesystem tier) put one below host memory.

What is modelled, and why this way:

- **Only what passed through the CPU tier.** The drive takes the blocks the CPU tier (distsim/instance/
  cpu_kv.py) evicts: a write-back, so the drive needs ``cpu_kv_blocks`` > 0. In LMCache's hierarchy every
  chunk enters host memory first (the disk backend writes from the CPU backend's memory objects and reads
  back into them); vLLM's offloading connector stores into host memory; the drive is reached from there.
  LMCache writes a chunk to disk when it is put in host memory (write-through, asynchronously); writing it
  back when host memory evicts it moves the same chunks, fewer times (a chunk hit again while on the CPU is
  never written), and keeps the drive's content what the CPU tier could not keep.
- **Writes queue on the drive.** The blocks one CPU store evicts are written in one operation, after the
  writes already queued: ``latency_us + blocks x block bytes / write_gbps``, rounded half up to whole
  microseconds. A block is readable only once its write is complete; until then it can be neither hit nor
  evicted, and it takes its room on the drive from the moment the write is queued (as LMCache counts a put
  in the disk's size when it submits it). A block the drive already holds is not written again (LMCache
  skips a repeated save) but becomes its most recent.
- **A write that finds no room is dropped.** When the drive cannot evict enough written, unread blocks to
  hold a write (every block is being written or read), the write is skipped and its blocks are lost, as
  LMCache's disk backend returns without writing when it finds no eviction candidate ("Disk space under
  pressure"). Not retried, unlike a skipped CPU store (whose blocks are still on the GPU and offered again):
  the evicted blocks are gone from host memory. A drive too slow for the evictions therefore fills with
  writes in flight, and the writes beyond drop, which is how the write bandwidth bounds the write-back.
- **LRU eviction** of written blocks that no load is reading; a lookup that hits touches the blocks.
- **Loads on a miss on the GPU and on the CPU.** When a waiting request's GPU prefix hit ends and the CPU
  tier has not the next block either, the drive is asked for the blocks that follow; the consecutive run of
  readable blocks is read in one operation (``latency_us + blocks x block bytes / read_gbps``, after the
  reads already queued) and then crosses the host link to the GPU as a CPU tier load does, queued behind
  the loads before it (LMCache reads a chunk into host memory and copies it to the GPU from there; GPU
  Direct Storage, which skips host memory, is not modelled). Meanwhile the request waits off the queue
  exactly as for a CPU load (distsim/instance/cpu_loads.py), and its blocks stay pinned on the drive. On
  landing the blocks join the GPU prefix cache; the request's next step offers them to the CPU tier, which
  stores those it lacks, as it stores any block the request holds.
- **One drive per engine**, holding whole blocks: each tensor-parallel rank writes and reads its shard (the
  block's bytes are the engine's, over all its GPUs). Reads and writes each run at the datasheet's
  sequential rate, independently; a real drive shares its bandwidth between them, and LMCache runs reads
  ahead of queued writes.
- The evicted blocks are read from host memory for the write at once (the CPU tier's room is free when it
  evicts); the copy they wait in until the drive takes them is not counted against ``cpu_kv_blocks``.

Outputs (distsim/instance/storage_kv/feature.py): instances.parquet's ``storage_*`` columns and
summary.json's ``storage_kv`` (hits by tier, bytes moved), only when a tier is on.
"""
