import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * Apache Curator's side of aiozklock's benchmarks (benchmarks/run.py compiles it at run time).
 *
 * <p>Usage: {@code java CuratorBench SCENARIO key=value...}, the same scenarios and parameters as
 * {@code python -m benchmarks.worker}. After its setup (connect, warm-up) it prints {@code
 * {"event": "ready"}}, waits for a line on stdin, measures, prints {@code {"event":
 * "measured"}} and then one JSON result line.
 * Times are System.nanoTime(), which is CLOCK_MONOTONIC on Linux like Python's
 * time.monotonic_ns(), so intervals from several processes can be merged.
 */
public final class CuratorBench {
    private static final int SESSION_TIMEOUT_MS = 10_000;
    private static final BufferedReader STDIN =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private final Map<String, String> params;
    private final List<CuratorFramework> clients = new ArrayList<>();

    /** A plain field on purpose: a broken lock would lose increments. */
    private long sharedCounter;

    private CuratorBench(Map<String, String> params) {
        this.params = params;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> params = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            params.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        CuratorBench bench = new CuratorBench(params);
        int status = 1;
        try {
            String result = switch (args[0]) {
                case "uncontended" -> bench.uncontended();
                case "contended" -> bench.contended(InterProcessMutex::new);
                case "multilock" -> bench.multilock();
                case "election" -> bench.contended(Campaign::new);
                case "rw_write" -> bench.timedCycles(
                        new InterProcessReadWriteLock(bench.connect(), bench.param("path"))
                                .writeLock());
                case "rw_read" -> bench.timedCycles(
                        new InterProcessReadWriteLock(bench.connect(), bench.param("path"))
                                .readLock());
                case "rwmix" -> bench.rwmix();
                case "semaphore_cycle" -> bench.timedCycles(
                        bench.leaseHolder(bench.connect(), bench.param("path")));
                case "semaphore" -> bench.contended(bench::leaseHolder);
                case "many" -> bench.many();
                case "floor" -> bench.floor();
                case "requests" -> bench.requests();
                case "connect" -> bench.newSessions();
                default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
            };
            System.out.println("{\"event\": \"result\", " + result + "}");
            System.out.flush();
            status = 0;
        } finally {
            bench.closeAll();
            System.exit(status); // do not wait for Curator's non-daemon threads
        }
    }

    // ------------------------------------------------------------------ scenarios

    private String uncontended() throws Exception {
        return timedCycles(new InterProcessMutex(connect(), param("path")));
    }

    /** InterProcessMultiLock over one InterProcessMutex per member path. */
    private String multilock() throws Exception {
        List<String> paths = new ArrayList<>();
        for (int i = 0; i < intParam("members"); i++) {
            paths.add(param("path") + "/m" + i);
        }
        return timedCycles(new InterProcessMultiLock(connect(), paths));
    }

    private String timedCycles(InterProcessLock mutex) throws Exception {
        for (int i = 0; i < intParam("warmup"); i++) {
            cycle(mutex);
        }
        ready();
        int iterations = intParam("iterations");
        long[] latencies = new long[iterations];
        long cpu0 = processCpuNanos();
        long wall0 = System.nanoTime();
        for (int i = 0; i < iterations; i++) {
            long start = System.nanoTime();
            cycle(mutex);
            latencies[i] = System.nanoTime() - start;
        }
        long wall = System.nanoTime() - wall0;
        long cpu = processCpuNanos() - cpu0;
        measured();
        return "\"latencies_ns\": " + json(latencies) + ", \"wall_ns\": " + wall
                + ", \"cpu_ns\": " + cpu;
    }

    /**
     * New sessions one after another: the time from creating a client to its CONNECTED
     * state (TCP, TLS handshake if configured, ZooKeeper's ConnectRequest), then a close
     * that is not timed. {@code warmup} untimed sessions first, then {@code iterations}.
     */
    private String newSessions() throws Exception {
        for (int i = 0; i < intParam("warmup"); i++) {
            newSession();
        }
        ready();
        long[] times = new long[intParam("iterations")];
        for (int i = 0; i < times.length; i++) {
            times[i] = newSession();
        }
        measured();
        return "\"connect_ns\": " + json(times);
    }

    private long newSession() throws InterruptedException {
        long start = System.nanoTime();
        CuratorFramework client = connect();
        long elapsed = System.nanoTime() - start;
        clients.remove(client);
        client.close();
        return elapsed;
    }

    /** Makes what each session contends with: a lock, or a campaign for leadership. */
    private interface Contender {
        InterProcessLock make(CuratorFramework client, String path);
    }

    /**
     * A LeaderLatch as a scope: acquire = start a new latch and await leadership, release =
     * close it (leave the election). A closed latch cannot start again: one per campaign.
     */
    private static final class Campaign implements InterProcessLock {
        private final CuratorFramework client;
        private final String path;
        private LeaderLatch latch;

        Campaign(CuratorFramework client, String path) {
            this.client = client;
            this.path = path;
        }

        @Override
        public void acquire() throws Exception {
            latch = new LeaderLatch(client, path);
            latch.start();
            latch.await();
        }

        @Override
        public boolean acquire(long time, TimeUnit unit) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void release() throws Exception {
            latch.close();
            latch = null;
        }

        @Override
        public boolean isAcquiredInThisProcess() {
            return latch != null && latch.hasLeadership();
        }
    }

    private String contended(Contender contender) throws Exception {
        List<InterProcessLock> mutexes = new ArrayList<>();
        for (CuratorFramework client : connect(intParam("sessions"))) {
            mutexes.add(contender.make(client, param("path")));
        }
        List<long[]> intervals = new ArrayList<>();
        List<List<long[]>> sinks = new ArrayList<>();
        for (int i = 0; i < mutexes.size(); i++) {
            sinks.add(intervals);
        }
        contend(mutexes, sinks);
        return "\"intervals\": " + json(intervals) + ", \"counter\": " + sharedCounter;
    }

    /**
     * Readers and writers on one InterProcessReadWriteLock path, each its own session (one
     * CuratorFramework) and thread; the sections of each side apart.
     */
    private String rwmix() throws Exception {
        int readers = intParam("sessions");
        List<InterProcessLock> locks = new ArrayList<>();
        List<List<long[]>> sinks = new ArrayList<>();
        List<long[]> reads = new ArrayList<>();
        List<long[]> writes = new ArrayList<>();
        List<CuratorFramework> sessions = connect(readers + intParam("writers"));
        for (int i = 0; i < sessions.size(); i++) {
            InterProcessReadWriteLock rw =
                    new InterProcessReadWriteLock(sessions.get(i), param("path"));
            locks.add(i < readers ? rw.readLock() : rw.writeLock());
            sinks.add(i < readers ? reads : writes);
        }
        contend(locks, sinks);
        return "\"reads\": " + json(reads) + ", \"writes\": " + json(writes);
    }

    /**
     * Each lock warms up ({@code warmup} cycles, one after the other), then after "go" one
     * thread each loops acquire, critical section, release until the duration is over, adding
     * (enter, exit) to its sink. Every section increments the shared counter across a yield.
     */
    private void contend(List<InterProcessLock> mutexes, List<List<long[]>> sinks)
            throws Exception {
        for (InterProcessLock mutex : mutexes) {
            for (int i = 0; i < intParam("warmup"); i++) {
                cycle(mutex);
            }
        }
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        long durationNanos = (long) (Double.parseDouble(param("duration")) * 1e9);
        long[] deadline = new long[1];
        Throwable[] failure = new Throwable[1];
        for (int index = 0; index < mutexes.size(); index++) {
            InterProcessLock mutex = mutexes.get(index);
            List<long[]> sink = sinks.get(index);
            Thread thread = new Thread(() -> {
                try {
                    go.await();
                    List<long[]> mine = new ArrayList<>();
                    while (true) {
                        mutex.acquire();
                        long enter = System.nanoTime();
                        long value = sharedCounter;
                        Thread.yield();
                        sharedCounter = value + 1;
                        long exit = System.nanoTime();
                        mutex.release();
                        mine.add(new long[] {enter, exit});
                        if (exit >= deadline[0]) {
                            break;
                        }
                    }
                    synchronized (sinks) {
                        sink.addAll(mine);
                    }
                } catch (Throwable t) {
                    failure[0] = t;
                }
            });
            thread.start();
            threads.add(thread);
        }
        ready();
        deadline[0] = System.nanoTime() + durationNanos;
        go.countDown();
        for (Thread thread : threads) {
            thread.join();
        }
        measured();
        if (failure[0] != null) {
            throw new RuntimeException(failure[0]);
        }
    }

    /** A semaphore lease as a scope: acquire = take a lease, release = return it. */
    private InterProcessLock leaseHolder(CuratorFramework client, String path) {
        return new LeaseHolder(new InterProcessSemaphoreV2(client, path, intParam("leases")));
    }

    private static final class LeaseHolder implements InterProcessLock {
        private final InterProcessSemaphoreV2 semaphore;
        private Lease lease;

        LeaseHolder(InterProcessSemaphoreV2 semaphore) {
            this.semaphore = semaphore;
        }

        @Override
        public void acquire() throws Exception {
            lease = semaphore.acquire();
        }

        @Override
        public boolean acquire(long time, TimeUnit unit) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void release() {
            semaphore.returnLease(lease);
            lease = null;
        }

        @Override
        public boolean isAcquiredInThisProcess() {
            return lease != null;
        }
    }

    /**
     * Per-request locking: one CuratorFramework, one thread per task, each with an
     * InterProcessMutex on its own path (a mutex is owned by the thread that acquired it).
     * Each thread warms up, then all wait for "go" and loop until the duration is over.
     */
    private String requests() throws Exception {
        CuratorFramework client = connect();
        int concurrency = intParam("concurrency");
        long holdNanos = (long) (Double.parseDouble(param("hold")) * 1e9);
        long durationNanos = (long) (Double.parseDouble(param("duration")) * 1e9);
        CountDownLatch warmed = new CountDownLatch(concurrency);
        CountDownLatch go = new CountDownLatch(1);
        long[] deadline = new long[1];
        List<List<Long>> perThread = new ArrayList<>();
        AtomicInteger errors = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < concurrency; i++) {
            InterProcessMutex mutex = new InterProcessMutex(client, param("path") + "/" + i);
            List<Long> latencies = new ArrayList<>();
            perThread.add(latencies);
            Thread thread = new Thread(() -> {
                try {
                    for (int w = 0; w < intParam("warmup"); w++) {
                        holdCycle(mutex, holdNanos);
                    }
                    warmed.countDown();
                    go.await();
                    while (true) {
                        long start = System.nanoTime();
                        holdCycle(mutex, holdNanos);
                        long end = System.nanoTime();
                        latencies.add(end - start);
                        if (end >= deadline[0]) {
                            break;
                        }
                    }
                } catch (Throwable t) {
                    t.printStackTrace();
                    errors.incrementAndGet();
                    warmed.countDown();
                }
            });
            thread.start();
            threads.add(thread);
        }
        warmed.await();
        ready();
        long started = System.nanoTime();
        deadline[0] = started + durationNanos;
        go.countDown();
        for (Thread thread : threads) {
            thread.join();
        }
        long measuredNanos = System.nanoTime() - started;
        measured();
        return requestsResult(perThread, measuredNanos, errors.get());
    }

    private static void holdCycle(InterProcessMutex mutex, long holdNanos) throws Exception {
        mutex.acquire();
        try {
            if (holdNanos > 0) {
                Thread.sleep(holdNanos / 1_000_000, (int) (holdNanos % 1_000_000));
            } else {
                Thread.yield();
            }
        } finally {
            mutex.release();
        }
    }

    private static String requestsResult(List<List<Long>> perThread, long measured, int errors) {
        StringBuilder latencies = new StringBuilder("[");
        StringBuilder perTask = new StringBuilder("[");
        for (List<Long> mine : perThread) {
            perTask.append(perTask.length() > 1 ? ", " : "").append(mine.size());
            for (long latency : mine) {
                latencies.append(latencies.length() > 1 ? ", " : "").append(latency);
            }
        }
        return "\"latencies_ns\": " + latencies.append(']') + ", \"per_task\": "
                + perTask.append(']') + ", \"measured_ns\": " + measured
                + ", \"errors\": " + errors;
    }

    /** Many distinct locks at once: InterProcessMutex is owned by a thread, so one thread each. */
    private String many() throws Exception {
        CuratorFramework client = connect();
        String root = param("path");
        cycle(new InterProcessMutex(client, root + "/warm-up"));
        int locks = intParam("locks");
        ready();
        long rssBefore = procStatusKib("VmRSS");
        CountDownLatch acquired = new CountDownLatch(locks);
        CountDownLatch releaseNow = new CountDownLatch(1);
        CountDownLatch released = new CountDownLatch(locks);
        AtomicInteger held = new AtomicInteger();
        long start = System.nanoTime();
        for (int i = 0; i < locks; i++) {
            InterProcessMutex mutex = new InterProcessMutex(client, root + "/lock-" + i);
            new Thread(() -> {
                try {
                    mutex.acquire();
                    held.incrementAndGet();
                    acquired.countDown();
                    releaseNow.await();
                    mutex.release();
                    released.countDown();
                } catch (Exception e) {
                    e.printStackTrace();
                    System.exit(1);
                }
            }).start();
        }
        acquired.await();
        long allHeld = System.nanoTime();
        releaseNow.countDown();
        released.await();
        long end = System.nanoTime();
        measured();
        return "\"acquire_ns\": " + (allHeld - start) + ", \"release_ns\": " + (end - allHeld)
                + ", \"held\": " + held.get() + ", \"rss_before_kib\": " + rssBefore
                + ", \"peak_rss_kib\": " + procStatusKib("VmHWM");
    }

    /** The raw floor: ZooKeeper's own Java client under Curator, without any recipe. */
    private String floor() throws Exception {
        ZooKeeper zk = connect().getZookeeperClient().getZooKeeper();
        String root = param("path");
        int pairs = intParam("pairs");
        int batch = intParam("batch");
        for (int i = 0; i < intParam("warmup"); i++) {
            createThenDelete(zk, root + "/w" + i);
        }
        ready();
        long[] latencies = new long[pairs];
        for (int i = 0; i < pairs; i++) {
            long start = System.nanoTime();
            createThenDelete(zk, root + "/n" + i);
            latencies[i] = System.nanoTime() - start;
        }
        AtomicInteger errors = new AtomicInteger();
        long start = System.nanoTime();
        for (int first = 0; first < pairs; first += batch) {
            int count = Math.min(batch, pairs - first);
            CountDownLatch created = new CountDownLatch(count);
            for (int i = first; i < first + count; i++) {
                zk.create(root + "/p" + i, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
                        CreateMode.PERSISTENT, (rc, path, ctx, name) -> {
                            countError(errors, rc);
                            created.countDown();
                        }, null);
            }
            created.await();
            CountDownLatch deleted = new CountDownLatch(count);
            for (int i = first; i < first + count; i++) {
                zk.delete(root + "/p" + i, -1, (rc, path, ctx) -> {
                    countError(errors, rc);
                    deleted.countDown();
                }, null);
            }
            deleted.await();
        }
        long wall = System.nanoTime() - start;
        measured();
        return "\"pair_latencies_ns\": " + json(latencies) + ", \"pipelined_pairs\": " + pairs
                + ", \"pipelined_ns\": " + wall + ", \"errors\": " + errors.get();
    }

    // ------------------------------------------------------------------ helpers

    private CuratorFramework connect() throws InterruptedException {
        return connect(1).get(0);
    }

    /** Starts {@code count} clients (sessions) at once, then waits until each is connected. */
    private List<CuratorFramework> connect(int count) throws InterruptedException {
        List<CuratorFramework> started = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            CuratorFramework client = CuratorFrameworkFactory.newClient(param("hosts"),
                    SESSION_TIMEOUT_MS, SESSION_TIMEOUT_MS, new RetryNTimes(3, 100));
            clients.add(client);
            client.start();
            started.add(client);
        }
        for (CuratorFramework client : started) {
            if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not connected to " + param("hosts"));
            }
        }
        return started;
    }

    /** Closing a client waits for the server and for Curator's threads: all at once. */
    private void closeAll() throws InterruptedException {
        List<Thread> closers = new ArrayList<>();
        for (CuratorFramework client : clients) {
            Thread closer = new Thread(client::close);
            closer.start();
            closers.add(closer);
        }
        for (Thread closer : closers) {
            closer.join();
        }
    }

    private static void cycle(InterProcessLock mutex) throws Exception {
        mutex.acquire();
        mutex.release();
    }

    private static void createThenDelete(ZooKeeper zk, String path)
            throws KeeperException, InterruptedException {
        zk.create(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        zk.delete(path, -1);
    }

    private static void countError(AtomicInteger errors, int rc) {
        if (rc != KeeperException.Code.OK.intValue()) {
            errors.incrementAndGet();
        }
    }

    private static void ready() throws IOException {
        System.out.println("{\"event\": \"ready\"}");
        System.out.flush();
        if (STDIN.readLine() == null) {
            throw new IOException("stdin closed before 'go'");
        }
    }

    /** The measured part is over: the runner reads the wire counts now, before teardown. */
    private static void measured() {
        System.out.println("{\"event\": \"measured\"}");
        System.out.flush();
    }

    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static long procStatusKib(String field) throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith(field + ":")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        return -1;
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

    private static String json(List<long[]> intervals) {
        StringBuilder out = new StringBuilder("[");
        for (long[] interval : intervals) {
            out.append(out.length() > 1 ? ", " : "")
                    .append('[').append(interval[0]).append(", ").append(interval[1]).append(']');
        }
        return out.append(']').toString();
    }

    private static String json(long[] values) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < values.length; i++) {
            out.append(i > 0 ? ", " : "").append(values[i]);
        }
        return out.append(']').toString();
    }
}
