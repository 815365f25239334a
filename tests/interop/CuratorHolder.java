import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryNTimes;

/**
 * Apache Curator holding one lock until told to let go, for the doctor's tests
 * (tests/test_doctor_mixes.py compiles it at test time, as tests/test_interop.py does
 * CuratorPeer).
 *
 * <p>Usage: {@code java CuratorHolder HOSTS PATH RECIPE [MAX_LEASES]}, RECIPE being {@code
 * mutex} (InterProcessMutex), {@code read} (the read lock of an InterProcessReadWriteLock) or
 * {@code semaphore} (InterProcessSemaphoreV2 with MAX_LEASES). It acquires, prints {@code held
 * 0x<session id>}, waits for a line on stdin (or its end), releases, closes its session and
 * exits.
 *
 * <p>RECIPE {@code revocable}: an InterProcessMutex made revocable ({@code makeRevocable})
 * whose listener prints {@code revoke requested} and lets go: it releases on a revoke request
 * as on a line on stdin, then prints {@code released}. RECIPE {@code revoke}: no lock; {@code
 * Revoker.attemptRevoke} on the first of the mutex's participant nodes at PATH (its holder),
 * then it prints {@code revoked NODE} and exits.
 */
public final class CuratorHolder {
    private CuratorHolder() {}

    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10_000, 10_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + args[0]);
        }
        String path = args[1];
        if (args[2].equals("revoke")) {
            // Full paths, in Curator's order of the mutex: its holder first.
            String node = new InterProcessMutex(client, path).getParticipantNodes().iterator().next();
            Revoker.attemptRevoke(client, node);
            System.out.println("revoked " + node);
            System.out.flush();
            client.close();
            return;
        }
        if (args[2].equals("revocable")) {
            holdRevocable(client, new InterProcessMutex(client, path));
            return;
        }
        if (args[2].equals("revocable-read")) {
            holdRevocable(client, new InterProcessReadWriteLock(client, path).readLock());
            return;
        }
        InterProcessMutex mutex = null;
        Lease lease = null;
        if (args[2].equals("semaphore")) {
            lease = new InterProcessSemaphoreV2(client, path, Integer.parseInt(args[3])).acquire();
        } else {
            mutex =
                    args[2].equals("read")
                            ? new InterProcessReadWriteLock(client, path).readLock()
                            : new InterProcessMutex(client, path);
            mutex.acquire();
        }
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        System.out.println("held 0x" + Long.toHexString(session));
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        if (lease != null) {
            lease.close();
        } else {
            mutex.release();
        }
        client.close();
    }

    /** Holds {@code mutex}, made revocable, until a revoke request or a line on stdin. */
    private static void holdRevocable(CuratorFramework client, InterProcessMutex mutex)
            throws Exception {
        CountDownLatch letGo = new CountDownLatch(1);
        mutex.makeRevocable(
                lock -> {
                    System.out.println("revoke requested");
                    System.out.flush();
                    letGo.countDown();
                });
        mutex.acquire();
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        System.out.println("held 0x" + Long.toHexString(session));
        System.out.flush();
        Thread stdin =
                new Thread(
                        () -> {
                            try {
                                new BufferedReader(
                                                new InputStreamReader(
                                                        System.in, StandardCharsets.UTF_8))
                                        .readLine();
                            } catch (Exception e) {
                                // the end of stdin: let go too
                            }
                            letGo.countDown();
                        });
        stdin.setDaemon(true);
        stdin.start();
        letGo.await();
        mutex.release(); // the thread that acquired releases (Curator's mutex is per thread)
        System.out.println("released");
        System.out.flush();
        client.close();
    }
}
