import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

/**
 * Curator's side of tests/test_rwlock.py's interoperability test (compiled at test time).
 *
 * <p>Usage: {@code java CuratorReadWrite HOSTS PATH THREADS}. It prints {@code connected} once
 * its client is; then each thread loops on its own {@code InterProcessReadWriteLock} on PATH,
 * taking the read or the write lock at random and printing one line per critical section as
 * it goes, {@code NAME MODE START END} (System.nanoTime(), CLOCK_MONOTONIC on Linux, like
 * Python's time.monotonic()), until a line on stdin (or its end); then it prints {@code done}.
 * A thread that fails prints {@code error ...}.
 */
public final class CuratorReadWrite {
    private CuratorReadWrite() {}

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        String path = args[1];
        int threads = Integer.parseInt(args[2]);
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(hosts, 10_000, 5_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected in 30 s");
        }
        say("connected");
        AtomicBoolean stop = new AtomicBoolean();
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int index = t;
            workers[t] = new Thread(() -> loop(client, path, index, stop));
            workers[t].start();
        }
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        stop.set(true);
        for (Thread worker : workers) {
            worker.join();
        }
        client.close();
        say("done");
    }

    /** One whole line on stdout, flushed: the test reads the sections as they happen. */
    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static void loop(CuratorFramework client, String path, int index, AtomicBoolean stop) {
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        Random rng = new Random(index);
        try {
            while (!stop.get()) {
                boolean write = rng.nextDouble() < 0.4;
                InterProcessMutex lock = write ? rw.writeLock() : rw.readLock();
                if (!lock.acquire(10, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("not acquired in 10 s");
                }
                long start;
                long end;
                try {
                    start = System.nanoTime();
                    Thread.sleep(rng.nextInt(5));
                    end = System.nanoTime();
                } finally {
                    lock.release();
                }
                say("c" + index + " " + (write ? "write" : "read") + " " + start + " " + end);
            }
        } catch (Exception e) {
            say(("error " + e).replace('\n', ' '));
        }
    }
}
