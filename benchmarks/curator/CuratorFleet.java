import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

/**
 * Apache Curator's fleet worker (benchmarks/fleet.py compiles and starts it; the roles and the
 * protocol are those of benchmarks/clients/fleet_common.py).
 *
 * <p>Usage: {@code java CuratorFleet key=value...}. Each session is a {@code CuratorFramework};
 * each non-idle role runs in a thread of its own ({@code InterProcessMutex} is owned by the
 * thread that acquired it). Same retry policy as CuratorBench: {@code RetryNTimes(3, 100)}; a
 * failed attempt is retried by the role's loop after 100 ms.
 */
public final class CuratorFleet {
    private static final BufferedReader STDIN =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    private static final long RETRY_MS = 100;
    private static final long POLL_MS = 200;

    private final Map<String, String> params;
    private final List<Slot> slots = new ArrayList<>();
    private final Map<Integer, Integer> lineSizes = new HashMap<>();
    private final Map<Integer, CountDownLatch> held = new HashMap<>();
    private final List<Thread> threads = new ArrayList<>();
    private final CountDownLatch stop = new CountDownLatch(1);
    private final List<long[]> sections = new ArrayList<>();
    private final Map<String, AtomicInteger> counts = new ConcurrentHashMap<>();
    private volatile long markNs = -1;

    /** One session: its role, its path, and what it saw. */
    private static final class Slot {
        final String kind;
        final String path;
        final int shared;
        final int line;
        final CountDownLatch inRole = new CountDownLatch(1);
        final AtomicInteger lost = new AtomicInteger();
        CuratorFramework client;
        long idAtMark;
        long idAtStop;

        Slot(String kind, String path, int shared, int line) {
            this.kind = kind;
            this.path = path;
            this.shared = shared;
            this.line = line;
        }

        String role() {
            return kind.equals("anchor") || kind.equals("cycler") ? "holding" : kind;
        }
    }

    private CuratorFleet(Map<String, String> params) {
        this.params = params;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> params = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            params.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        CuratorFleet fleet = new CuratorFleet(params);
        int status = 1;
        try {
            fleet.run();
            status = 0;
        } finally {
            fleet.closeAll();
            System.exit(status); // do not wait for Curator's non-daemon threads
        }
    }

    private void run() throws Exception {
        long start = System.nanoTime();
        plan();
        connectAll();
        for (Slot slot : slots) {
            startRole(slot);
        }
        for (Slot slot : slots) {
            if (!slot.inRole.await(600, TimeUnit.SECONDS)) {
                throw new IllegalStateException("a session did not take its role in 600 s");
            }
        }
        emit("{\"event\": \"ready\", \"sessions\": " + slots.size() + ", \"in_role_s\": "
                + (System.nanoTime() - start) / 1e9 + "}");
        command("mark");
        markNs = System.nanoTime();
        for (Slot slot : slots) {
            slot.idAtMark = sessionId(slot);
        }
        emit("{\"event\": \"marked\"}");
        command("stop");
        for (Slot slot : slots) {
            slot.idAtStop = sessionId(slot);
        }
        stop.countDown();
        for (Thread thread : threads) {
            thread.interrupt(); // a waiting acquire() throws InterruptedException
        }
        for (Thread thread : threads) {
            thread.join(30_000);
        }
        emit(result());
    }

    /** Anchors, cyclers, queued, idle: as fleet_common.plan. */
    private void plan() {
        String root = param("root");
        int worker = intParam("worker");
        int anchors = intParam("anchors");
        int cyclers = intParam("holders") - anchors;
        int sharedPaths = intParam("shared_paths");
        for (int a = 0; a < anchors; a++) {
            slots.add(new Slot("anchor", root + "/line/" + worker + "-" + a, -1, a));
            held.put(a, new CountDownLatch(1));
            lineSizes.merge(a, 1, Integer::sum);
        }
        for (int i = 0; i < cyclers; i++) {
            int k = (intParam("first_cycler") + i) % sharedPaths;
            slots.add(new Slot("cycler", root + "/shared/" + k, k, -1));
        }
        for (int j = 0; j < intParam("queued"); j++) {
            int a = j % anchors;
            slots.add(new Slot("queued", root + "/line/" + worker + "-" + a, -1, a));
            lineSizes.merge(a, 1, Integer::sum);
        }
        for (int i = 0; i < intParam("idle"); i++) {
            slots.add(new Slot("idle", "", -1, -1));
        }
    }

    /** {@code connect_batch} sessions at a time: started together, then each connected. */
    private void connectAll() throws InterruptedException {
        int timeoutMs = (int) (Double.parseDouble(param("session_timeout")) * 1000);
        int batch = intParam("connect_batch");
        for (int first = 0; first < slots.size(); first += batch) {
            List<Slot> started = slots.subList(first, Math.min(first + batch, slots.size()));
            for (Slot slot : started) {
                slot.client = CuratorFrameworkFactory.newClient(param("hosts"), timeoutMs,
                        60_000, new RetryNTimes(3, 100));
                slot.client.getConnectionStateListenable().addListener((client, state) -> {
                    if (state == ConnectionState.LOST && markNs >= 0) {
                        slot.lost.incrementAndGet();
                    }
                });
                slot.client.start();
            }
            for (Slot slot : started) {
                if (!slot.client.blockUntilConnected(60, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("not connected to " + param("hosts"));
                }
            }
        }
    }

    private void startRole(Slot slot) {
        Runnable role = switch (slot.kind) {
            case "anchor" -> () -> anchor(slot);
            case "queued" -> () -> queued(slot);
            case "cycler" -> () -> cycler(slot);
            default -> null;
        };
        if (role == null) {
            slot.inRole.countDown();
            return;
        }
        Thread thread = new Thread(role);
        thread.setDaemon(true);
        thread.start();
        threads.add(thread);
    }

    private void anchor(Slot slot) {
        InterProcessMutex mutex = new InterProcessMutex(slot.client, slot.path);
        while (stop.getCount() > 0) {
            boolean holding = false;
            try {
                mutex.acquire();
                holding = true;
                try {
                    CountDownLatch line = held.get(slot.line);
                    if (line.getCount() > 0) {
                        line.countDown();
                        lineInPlace(slot);
                    }
                    stop.await();
                } finally {
                    mutex.release();
                }
            } catch (InterruptedException e) {
                return;
            } catch (Exception e) {
                if (stop.getCount() == 0) {
                    return;
                }
                count(holding ? "anchor lost" : "anchor retry: " + e.getClass().getSimpleName());
                pause();
            }
        }
    }

    /** The line's children counted until all are there (inside the anchor's body, which a
     * loss does not interrupt); a failed count is tried again. */
    private void lineInPlace(Slot slot) throws InterruptedException {
        while (true) {
            try {
                if (slot.client.getChildren().forPath(slot.path).size()
                        >= lineSizes.get(slot.line)) {
                    break;
                }
            } catch (InterruptedException e) {
                throw e;
            } catch (Exception e) {
                // a connection loss at setup: count again
            }
            Thread.sleep(POLL_MS);
        }
        for (Slot other : slots) {
            if (other.line == slot.line) {
                other.inRole.countDown();
            }
        }
    }

    private void queued(Slot slot) {
        InterProcessMutex mutex = new InterProcessMutex(slot.client, slot.path);
        while (stop.getCount() > 0) {
            try {
                held.get(slot.line).await();
                mutex.acquire();
                try {
                    count("queued granted");
                    stop.await();
                } finally {
                    mutex.release();
                }
            } catch (InterruptedException e) {
                return;
            } catch (Exception e) {
                if (stop.getCount() == 0) {
                    return;
                }
                count("queued failed: " + e.getClass().getSimpleName());
                pause();
            }
        }
    }

    private void cycler(Slot slot) {
        InterProcessMutex mutex = new InterProcessMutex(slot.client, slot.path);
        long holdNanos = (long) (Double.parseDouble(param("hold_ms")) * 1e6);
        while (stop.getCount() > 0) {
            try {
                mutex.acquire();
                long enter = System.nanoTime();
                try {
                    TimeUnit.NANOSECONDS.sleep(holdNanos);
                } finally {
                    section(slot.shared, enter, System.nanoTime());
                    mutex.release();
                }
                slot.inRole.countDown();
            } catch (InterruptedException e) {
                return;
            } catch (Exception e) {
                if (stop.getCount() == 0) {
                    return;
                }
                count("cycle failed: " + e.getClass().getSimpleName());
                pause();
            }
        }
    }

    private synchronized void section(int shared, long enter, long exit) {
        if (markNs >= 0 && enter >= markNs) {
            sections.add(new long[] {shared, enter, exit});
        }
    }

    private void count(String what) {
        if (markNs >= 0) {
            counts.computeIfAbsent(what, k -> new AtomicInteger()).incrementAndGet();
        }
    }

    private static void pause() {
        try {
            Thread.sleep(RETRY_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static long sessionId(Slot slot) {
        try {
            return slot.client.getZookeeperClient().getZooKeeper().getSessionId();
        } catch (Exception e) {
            return 0;
        }
    }

    private synchronized String result() {
        StringBuilder out = new StringBuilder("{\"event\": \"result\", \"sessions\": [");
        for (int i = 0; i < slots.size(); i++) {
            Slot s = slots.get(i);
            out.append(i > 0 ? ", " : "").append("[\"").append(s.role()).append("\", ")
                    .append(s.idAtMark).append(", ").append(s.idAtStop).append(", ")
                    .append(s.lost.get()).append(']');
        }
        out.append("], \"sections\": [");
        for (int i = 0; i < sections.size(); i++) {
            long[] s = sections.get(i);
            out.append(i > 0 ? ", " : "").append('[').append(s[0]).append(", ").append(s[1])
                    .append(", ").append(s[2]).append(']');
        }
        out.append("], \"counts\": {");
        int i = 0;
        for (Map.Entry<String, AtomicInteger> entry : counts.entrySet()) {
            out.append(i++ > 0 ? ", " : "").append('"').append(entry.getKey()).append("\": ")
                    .append(entry.getValue().get());
        }
        return out.append("}, \"mark_ns\": ").append(markNs).append('}').toString();
    }

    /** Closing a client waits for the server and for Curator's threads: many at once. */
    private void closeAll() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(intParam("connect_batch"));
        List<Future<?>> closing = new ArrayList<>();
        for (Slot slot : slots) {
            if (slot.client != null) {
                closing.add(pool.submit(slot.client::close));
            }
        }
        for (Future<?> future : closing) {
            future.get();
        }
        pool.shutdown();
    }

    private static void command(String expected) throws IOException {
        String line = STDIN.readLine();
        if (line == null || !line.strip().equals(expected)) {
            throw new IOException("expected " + expected + " on stdin, got " + line);
        }
    }

    private static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private String param(String name) {
        String value = params.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing parameter " + name);
        }
        return value;
    }

    private int intParam(String name) {
        return Integer.parseInt(param(name));
    }
}
