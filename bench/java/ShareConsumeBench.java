import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Share-consume benchmark on Apache Kafka's own Java client (issue 26; bench/java_share.py runs it).
 *
 * Args: bootstrap topic group consumers implicit|explicit records timeout_s [jmx_pid]
 *
 * Starts {@code consumers} KafkaShareConsumers (one thread each, client defaults for fetch
 * sizes and waits) on a topic of one partition holding offsets 0..records-1 (or, with
 * -Dpartitions=N, record i at offset i / N of partition i % N), in a share group
 * that reads from the earliest offset. Explicit mode ACCEPTs every record (sent with the next
 * poll). Prints JSON lines on stdout: {"event":"first",...} when the first record arrives (the
 * driver samples the broker's CPU and counters then), {"event":"done",...} once every offset was
 * delivered (before the consumers close: the driver samples again), then {"event":"result",...}
 * with the client's share-fetch metrics summed over the consumers. With jmx_pid (a local Kafka
 * broker JVM) it also attaches to that JVM and adds the deltas of its share-fetch MBeans between
 * "first" and "done".
 *
 * With -Dbootstraps=B0,B1,... (independent brokers, each holding records / n records of the
 * topic in the layout above) consumer i reads from broker i % n, and record j of broker k counts
 * as record k * (records / n) + j: one JVM spread over brokers that are not a cluster.
 */
public final class ShareConsumeBench {
    static volatile boolean stop;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int consumers = Integer.parseInt(args[3]);
        String mode = args[4];
        int records = Integer.parseInt(args[5]);
        long timeoutMs = (long) (Double.parseDouble(args[6]) * 1000);
        Jmx jmx = args.length > 7 ? Jmx.attach(args[7]) : null;
        int partitions = Integer.getInteger("partitions", 1);  // -Dpartitions=N (java_share.py)
        // -Drate=N: consume at most N records/s over all consumers (each thread paces itself to
        // its share by sleeping after a poll), so systems can be compared at one offered load.
        double perThreadRate = Double.parseDouble(System.getProperty("rate", "0")) / consumers;
        String spread = System.getProperty("bootstraps");  // a cluster's bootstrap has commas too
        String[] bootstraps = spread == null ? new String[] {bootstrap} : spread.split(",");
        int perBroker = records / bootstraps.length;

        AtomicLongArray seen = new AtomicLongArray(records / 64 + 1);
        AtomicInteger distinct = new AtomicInteger();
        AtomicLong delivered = new AtomicLong();
        AtomicLong polls = new AtomicLong();
        AtomicLong emptyPolls = new AtomicLong();
        // Acknowledgements the client reports as failed (its commit callback): how many, and the
        // first few with their partitions, offsets and exception on stderr.
        AtomicLong ackFailures = new AtomicLong();
        long[] firstNs = {0};
        long[] lastNs = {0};
        Map<String, Double> jmxFirst = new TreeMap<>();
        CountDownLatch done = new CountDownLatch(1);
        List<KafkaShareConsumer<byte[], byte[]>> all = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        long started = System.nanoTime();
        for (int i = 0; i < consumers; i++) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstraps[i % bootstraps.length]);
            long base = (long) (i % bootstraps.length) * perBroker;
            p.put("group.id", group);
            p.put("client.id", group + "-" + i);
            p.put("share.acknowledgement.mode", mode);
            // No client telemetry push (Kafka 4.1 would accept it, Shoal does not offer it):
            // the same requests against both brokers.
            p.put("enable.metrics.push", "false");
            String extra = System.getenv("SHARE_BENCH_PROPS");  // k=v;k=v, e.g. for experiments
            if (extra != null && !extra.isBlank()) {
                for (String kv : extra.split(";")) {
                    String[] parts = kv.split("=", 2);
                    p.put(parts[0].trim(), parts[1].trim());
                }
            }
            KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(
                p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            all.add(c);
            String who = group + "-" + i;
            c.setAcknowledgementCommitCallback((offsets, exception) -> {
                if (exception == null) {
                    return;
                }
                long n = ackFailures.incrementAndGet();
                if (n <= 20) {
                    System.err.println("ack failure " + n + " at consumer " + who + ", "
                        + System.currentTimeMillis() + " ms: " + exception + " for " + offsets);
                }
            });
            boolean explicit = mode.equals("explicit");
            Thread t = new Thread(() -> {
                c.subscribe(List.of(topic));
                long paceStart = 0, paced = 0;
                while (!stop) {
                    ConsumerRecords<byte[], byte[]> got = c.poll(Duration.ofMillis(500));
                    polls.incrementAndGet();
                    if (got.isEmpty()) {
                        emptyPolls.incrementAndGet();
                        continue;
                    }
                    delivered.addAndGet(got.count());
                    if (perThreadRate > 0) {
                        if (paceStart == 0) {
                            paceStart = System.nanoTime();
                        }
                        paced += got.count();
                        long dueNs = paceStart + (long) (paced / perThreadRate * 1e9);
                        long ahead = dueNs - System.nanoTime();
                        if (ahead > 0) {
                            try {
                                Thread.sleep(ahead / 1_000_000, (int) (ahead % 1_000_000));
                            } catch (InterruptedException e) {
                                return;
                            }
                        }
                    }
                    int fresh = 0;
                    for (ConsumerRecord<byte[], byte[]> r : got) {
                        // Record i went to partition i % partitions at offset i / partitions.
                        long off = base + r.offset() * partitions + r.partition();
                        if (off >= 0 && off < records) {
                            int w = (int) (off >>> 6);
                            long bit = 1L << (off & 63);
                            long old;
                            do {
                                old = seen.get(w);
                            } while ((old & bit) == 0 && !seen.compareAndSet(w, old, old | bit));
                            if ((old & bit) == 0) {
                                fresh++;
                            }
                        }
                        if (explicit) {
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                    }
                    if (fresh > 0) {
                        int before = distinct.getAndAdd(fresh);
                        long now = System.nanoTime();
                        synchronized (firstNs) {
                            if (firstNs[0] == 0) {
                                firstNs[0] = now;
                                if (jmx != null) {
                                    jmxFirst.putAll(jmx.counts());
                                }
                                emit("{\"event\":\"first\",\"records\":" + (before + fresh) + "}");
                            }
                            lastNs[0] = Math.max(lastNs[0], now);
                        }
                        if (before + fresh >= records) {
                            done.countDown();
                        }
                    }
                }
            }, "share-consumer-" + i);
            threads.add(t);
            t.start();
        }
        // Wait for every record; give up at the timeout, or after 20 s without a new record
        // (the 4.1 client can livelock on a starved machine: its application threads flood
        // the background thread with events, which then sends nothing; see bench/README.md).
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        // -Dstall.ms=N: give up after N ms without a new record (default 20 s; longer than the
        // 30 s acquisition lock lets a round outlive a batch that was never acknowledged).
        long stallNs = Long.getLong("stall.ms", 20_000L) * 1_000_000L;
        int lastCount = -1;
        long lastProgress = System.nanoTime();
        boolean complete = false;
        while (!complete && System.nanoTime() < deadline) {
            complete = done.await(1, java.util.concurrent.TimeUnit.SECONDS);
            int now = distinct.get();
            if (now != lastCount) {
                lastCount = now;
                lastProgress = System.nanoTime();
            } else if (System.nanoTime() - lastProgress > stallNs) {
                break;
            }
        }
        long endNs = System.nanoTime();
        Map<String, Double> jmxDone = jmx != null ? jmx.counts() : Map.of();
        emit("{\"event\":\"done\",\"records\":" + distinct.get() + "}");
        stop = true;
        for (Thread t : threads) {
            t.join(30_000);
        }
        // Client metrics, summed over the consumers (before close, which removes them).
        Map<String, Double> sums = new TreeMap<>();
        for (KafkaShareConsumer<byte[], byte[]> c : all) {
            for (Map.Entry<MetricName, ? extends Metric> e : c.metrics().entrySet()) {
                MetricName n = e.getKey();
                if (!n.group().contains("fetch-manager") || !n.tags().containsKey("client-id")
                        || n.tags().size() != 1) {
                    continue;
                }
                Object v = e.getValue().metricValue();
                if (v instanceof Number num && !Double.isNaN(num.doubleValue())) {
                    sums.merge(n.name(), num.doubleValue(), Double::sum);
                }
            }
        }
        double span = Math.max(lastNs[0] - firstNs[0], 1) / 1e9;
        StringBuilder sb = new StringBuilder("{\"event\":\"result\"");
        sb.append(",\"complete\":").append(complete);
        sb.append(",\"records\":").append(distinct.get());
        sb.append(",\"delivered\":").append(delivered.get());
        sb.append(",\"polls\":").append(polls.get());
        sb.append(",\"empty_polls\":").append(emptyPolls.get());
        sb.append(",\"ack_failures\":").append(ackFailures.get());
        sb.append(",\"seconds\":").append(fmt(span));
        sb.append(",\"rate\":").append(fmt(distinct.get() / span));
        sb.append(",\"incl_join_seconds\":").append(fmt((endNs - started) / 1e9));
        sb.append(",\"client\":").append(json(sums));
        if (jmx != null) {
            Map<String, Double> delta = new TreeMap<>();
            for (Map.Entry<String, Double> e : jmxDone.entrySet()) {
                delta.put(e.getKey(), e.getValue() - jmxFirst.getOrDefault(e.getKey(), 0.0));
            }
            sb.append(",\"jmx\":").append(json(delta));
            jmx.close();
        }
        sb.append('}');
        emit(sb.toString());
        // Close in parallel, bounded: a livelocked client never finishes close() (its
        // background thread does not process the leave event), so the JVM exits regardless.
        List<Thread> closers = new ArrayList<>();
        for (KafkaShareConsumer<byte[], byte[]> c : all) {
            Thread t = new Thread(() -> c.close(Duration.ofSeconds(10)));
            t.setDaemon(true);
            t.start();
            closers.add(t);
        }
        long closeBy = System.nanoTime() + 15_000_000_000L;
        for (Thread t : closers) {
            t.join(Math.max(1, (closeBy - System.nanoTime()) / 1_000_000));
        }
        System.exit(0);
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String fmt(double d) {
        return String.format(Locale.ROOT, "%.6f", d);
    }

    static String json(Map<String, Double> m) {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, Double> e : m.entrySet()) {
            if (sb.length() > 1) {
                sb.append(',');
            }
            sb.append('"').append(e.getKey().replace("\"", "'")).append("\":").append(fmt(e.getValue()));
        }
        return sb.append('}').toString();
    }

    /** The share-fetch MBeans of a local Kafka broker JVM, read through the attach API. */
    static final class Jmx {
        final JMXConnector connector;
        final MBeanServerConnection conn;

        Jmx(JMXConnector connector) throws Exception {
            this.connector = connector;
            this.conn = connector.getMBeanServerConnection();
        }

        static Jmx attach(String pid) throws Exception {
            Class<?> vmClass = Class.forName("com.sun.tools.attach.VirtualMachine");
            Object vm = vmClass.getMethod("attach", String.class).invoke(null, pid);
            String url = (String) vmClass.getMethod("startLocalManagementAgent").invoke(vm);
            vmClass.getMethod("detach").invoke(vm);
            return new Jmx(JMXConnectorFactory.connect(new JMXServiceURL(url)));
        }

        /** Count of every meter whose name mentions ShareFetch (requests, expirations...). */
        Map<String, Double> counts() {
            Map<String, Double> out = new TreeMap<>();
            try {
                Set<ObjectName> names = conn.queryNames(new ObjectName("kafka.*:*"), null);
                for (ObjectName n : names) {
                    String s = n.toString();
                    if (!s.contains("ShareFetch") && !s.contains("ShareAcknowledge")
                            && !s.contains("ShareGroup")) {
                        continue;
                    }
                    try {
                        Object v = conn.getAttribute(n, "Count");
                        if (v instanceof Number num) {
                            out.merge(s, num.doubleValue(), Double::sum);
                        }
                    } catch (Exception notAMeter) {
                        try {
                            Object v = conn.getAttribute(n, "Value");
                            if (v instanceof Number num) {
                                out.merge(s, num.doubleValue(), Double::sum);
                            }
                        } catch (Exception ignored) {
                            // neither a meter nor a numeric gauge
                        }
                    }
                }
            } catch (Exception e) {
                out.put("jmx_error", -1.0);
            }
            return out;
        }

        void close() throws Exception {
            connector.close();
        }
    }

    private ShareConsumeBench() {
    }
}
