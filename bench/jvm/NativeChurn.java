// NativeChurn - 100 threads allocating native memory, as a JVM service does off-heap:
// java.util.zip Deflater/Inflater (zlib's malloc'ed state, 256 KiB+ per stream) and
// direct ByteBuffers (malloc through Unsafe.allocateMemory), created and released in a
// loop. The Java heap stays small; what grows is the C heap, so the RSS is the malloc
// in use. Prints one RESULT line (the bench/workloads contract) after all threads end.
// Usage: java NativeChurn <threads> <iterations per thread> [preset]. Built and run by
// tools/strata_tool/exp_jvm.py (javac into the output directory).
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.DataFormatException;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public final class NativeChurn {
  static final int PAYLOAD = 4 * 1024;

  static long status(String field) {
    try {
      for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/status"))) {
        if (line.startsWith(field + ":")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
      }
    } catch (java.io.IOException e) {
      return -1;
    }
    return -1;
  }

  public static void main(String[] args) throws Exception {
    int threads = Integer.parseInt(args[0]);
    int iters = Integer.parseInt(args[1]);
    byte[] text = new byte[PAYLOAD];
    java.util.Random r = new java.util.Random(1);
    String words = "arena slab extent cache thread page purge decay class region ";
    for (int i = 0; i < PAYLOAD; i++) text[i] = (byte) words.charAt(r.nextInt(words.length()));
    long[] checks = new long[threads];
    Thread[] ts = new Thread[threads];
    long t0 = System.nanoTime();
    for (int t = 0; t < threads; t++) {
      final int id = t;
      ts[t] = new Thread(() -> {
        byte[] out = new byte[PAYLOAD * 2];
        byte[] back = new byte[PAYLOAD];
        List<ByteBuffer> keep = new ArrayList<>();
        java.util.Random rr = new java.util.Random(id);
        long sum = 0;
        for (int i = 0; i < iters; i++) {
          Deflater d = new Deflater(1 + (i % 9));
          d.setInput(text);
          d.finish();
          int n = d.deflate(out);
          d.end();
          Inflater inf = new Inflater();
          inf.setInput(out, 0, n);
          try {
            int m = inf.inflate(back);
            if (m != PAYLOAD || back[m - 1] != text[m - 1]) throw new IllegalStateException("inflate");
          } catch (DataFormatException e) {
            throw new IllegalStateException(e);
          }
          inf.end();
          // Direct buffers of 1..32 KiB, a rolling window of up to 16 per thread; freed
          // explicitly is not possible, so they die with the GC (as in real services).
          ByteBuffer b = ByteBuffer.allocateDirect(1024 + rr.nextInt(31 * 1024));
          b.put(0, (byte) i);
          keep.add(b);
          if (keep.size() > 16) keep.remove(rr.nextInt(keep.size()));
          sum += n;
        }
        checks[id] = sum;
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    double secs = (System.nanoTime() - t0) / 1e9;
    long peak = status("VmHWM");
    System.gc();
    Thread.sleep(200);
    long fin = status("VmRSS");
    long ops = (long) threads * iters;
    System.out.printf(java.util.Locale.ROOT,
        "RESULT {\"workload\":\"jvm\",\"preset\":\"%s\",\"threads\":%d,\"ops\":%d,\"seconds\":%.4f,"
            + "\"ops_per_sec\":%.1f,\"peak_rss_kb\":%d,\"final_rss_kb\":%d}%n",
        args.length > 2 ? args[2] : "default", threads, ops, secs, ops / secs, peak, fin);
  }
}
