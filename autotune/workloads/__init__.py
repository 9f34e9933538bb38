"""Built-in reference workloads, written against :class:`autotune.Workload`.

Each module exposes ``build(**size_args) -> autotune.Workload`` with small defaults sized for a CPU core;
name one in a study file as ``workload.entrypoint``:

- ``autotune.workloads.mlp:build`` — a residual MLP regressing a fixed random teacher network on
  synthetic features whose per-sample transform costs real CPU time, so DataLoader workers and
  prefetching matter. Args: hidden, depth, input_dim, output_dim, samples, transform_cost, seed.
- ``autotune.workloads.convnet:build`` — a small residual ConvNet classifying synthetic class-pattern
  images with random-crop, flip and noise augmentation. Args: width, depth, image_size, samples,
  num_classes, seed.
- ``autotune.workloads.lm:build`` — a tiny byte-level causal transformer language model trained on the
  Python standard library's own source files (no download). Args: d_model, n_layers, n_heads, seq_len,
  max_bytes, seed.
- ``autotune.workloads.images:build`` — a small strided CNN classifying JPEG/PNG files written once to a
  cache folder and read, decoded and augmented in ``__getitem__``: input-bound at num_workers 0. Args:
  width, depth, crop_size, file_size, samples, num_classes, image_format, cache_dir, seed.
- ``autotune.workloads.text_shards:build`` — the ``lm`` transformer streamed from tokenised shard files
  through an IterableDataset (no ``len()``). Args: d_model, n_layers, n_heads, seq_len, max_bytes,
  shard_tokens, cache_dir, seed.
- ``autotune.workloads.gpt:build`` — a small decoder-only transformer on synthetic bigram-chain tokens, with
  everything the parallel mesh needs: a tensor-parallel plan and ``parallelize`` hook, pipeline split points
  and the pipeline's loss (docs/parallel.md). Args: vocab, dim, heads, layers, seq, samples, seed, hook.

Importing this package imports none of them (nor torch); the entrypoint loader imports the one named.
"""
