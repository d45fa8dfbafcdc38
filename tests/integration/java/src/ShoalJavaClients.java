import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Apache Kafka's Java clients (kafka-clients 4.1.0) against a Shoal broker.
 *
 * <p>Usage: {@code ShoalJavaClients PLAIN_BOOTSTRAP SASL_BOOTSTRAP PREFIX SCENARIO...}. The
 * scenarios run concurrently in this one JVM (its start-up is the expensive part); each prints
 * one JSON line on stdout, {@code {"scenario": NAME, ...what it observed}}, or
 * {@code {"scenario": NAME, "error": ..., "trace": ...}} when it threw. A scenario only
 * observes: the assertions are on the pytest side (test_java_clients.py). Every name a
 * scenario creates starts with PREFIX, so runs never share topics, groups or users. The plain
 * listener's client is a super user; the SASL one is used by the SCRAM user the ACL scenario
 * creates.
 */
public final class ShoalJavaClients {
    static final Duration T = Duration.ofSeconds(15);
    static String plain;
    static String sasl;
    static String prefix;

    public static void main(String[] args) throws Exception {
        plain = args[0];
        sasl = args[1];
        prefix = args[2];
        Map<String, Callable<Map<String, Object>>> all = new LinkedHashMap<>();
        all.put("share_explicit", ShoalJavaClients::shareExplicit);
        all.put("share_implicit", ShoalJavaClients::shareImplicit);
        all.put("share_lock_timeout", ShoalJavaClients::shareLockTimeout);
        all.put("share_two_members", ShoalJavaClients::shareTwoMembers);
        all.put("share_close_releases", ShoalJavaClients::shareCloseReleases);
        all.put("consumer_classic", () -> consumerGroup("classic"));
        all.put("consumer_consumer", () -> consumerGroup("consumer"));
        all.put("consumer_rolling_switch", ShoalJavaClients::consumerRollingSwitch);
        all.put("txn_read_committed", ShoalJavaClients::txnReadCommitted);
        all.put("txn_fencing", ShoalJavaClients::txnFencing);
        all.put("txn_consume_transform_produce", ShoalJavaClients::txnConsumeTransformProduce);
        all.put("admin_share_groups", ShoalJavaClients::adminShareGroups);
        all.put("admin_configs", ShoalJavaClients::adminConfigs);
        all.put("admin_acls_scram", ShoalJavaClients::adminAclsScram);
        all.put("admin_tools", ShoalJavaClients::adminTools);
        List<String> wanted = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            wanted.add(args[i]);
        }
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<Future<?>> running = new ArrayList<>();
        for (String name : wanted) {
            Callable<Map<String, Object>> body = all.get(name);
            running.add(pool.submit(() -> emit(name, body)));
        }
        for (Future<?> f : running) {
            f.get();
        }
        pool.shutdown();
        System.exit(0);  // client threads of a failed scenario must not keep the JVM up
    }

    static void emit(String name, Callable<Map<String, Object>> body) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", name);
        long t0 = System.nanoTime();
        try {
            if (body == null) {
                throw new IllegalArgumentException("unknown scenario " + name);
            }
            out.putAll(body.call());
        } catch (Throwable e) {
            out.put("error", e.toString());
            java.io.StringWriter sw = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(sw));
            out.put("trace", sw.toString());
        }
        out.put("seconds", (System.nanoTime() - t0) / 1e9);
        String line = json(out);
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    // ------------------------------------------------------------------ share consumers

    /** ACCEPT, RELEASE and REJECT one record each: only the released one comes back, counted twice. */
    static Map<String, Object> shareExplicit() throws Exception {
        String topic = prefix + "-sx", group = prefix + "-sx";
        setup(topic, 1, group, Map.of());
        produce(topic, 0, List.of("accept-me", "release-me", "reject-me"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(group, "explicit", Map.of())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> first = new ArrayList<>();
            long deadline = System.currentTimeMillis() + T.toMillis();
            while (first.size() < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    first.add(r);
                    AcknowledgeType t = switch (r.value()) {
                        case "accept-me" -> AcknowledgeType.ACCEPT;
                        case "release-me" -> AcknowledgeType.RELEASE;
                        default -> AcknowledgeType.REJECT;
                    };
                    c.acknowledge(r, t);
                }
            }
            out.put("first", describe(first));
            out.put("first_commit", commitErrors(c.commitSync(T)));
            List<ConsumerRecord<String, String>> again = new ArrayList<>();
            deadline = System.currentTimeMillis() + 4000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    again.add(r);
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
            out.put("again", describe(again));
            out.put("again_commit", commitErrors(c.commitSync(T)));
        }
        return out;
    }

    /** Implicit mode: the next poll acknowledges; a later member of the group sees only new records. */
    static Map<String, Object> shareImplicit() throws Exception {
        String topic = prefix + "-si", group = prefix + "-si";
        setup(topic, 1, group, Map.of());
        produce(topic, 0, List.of("a", "b", "c", "d", "e"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit", Map.of())) {
            c.subscribe(List.of(topic));
            out.put("first", describe(collectShare(c, 5, T.toMillis())));
            out.put("commit", commitErrors(c.commitSync(T)));
        }
        produce(topic, 0, List.of("f"));
        try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit", Map.of())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = collectShare(c, 1, T.toMillis());
            got.addAll(drainShare(c, 2000));
            out.put("second", describe(got));
        }
        return out;
    }

    /** A record one member holds past the group's lock duration goes to the other member. */
    static Map<String, Object> shareLockTimeout() throws Exception {
        String topic = prefix + "-sl", group = prefix + "-sl";
        // 1 s needs group.share.min.record.lock.duration.ms=1000 on the broker (Kafka's default is 15 s).
        setup(topic, 1, group, Map.of("share.record.lock.duration.ms", "1000"));
        produce(topic, 0, List.of("held"));
        Map<String, Object> out = new LinkedHashMap<>();
        // The holder's fetches wait at most 100 ms: a fetch of its still waiting on the broker when
        // the lock runs out would take the record again (delivery 2) and hold it another second.
        try (KafkaShareConsumer<String, String> a = shareConsumer(group, "explicit",
                 Map.of("fetch.max.wait.ms", "100"));
             KafkaShareConsumer<String, String> b = shareConsumer(group, "explicit", Map.of())) {
            a.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> held = collectShare(a, 1, T.toMillis());
            long acquired = System.currentTimeMillis();
            out.put("holder", describe(held));
            b.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> later = new ArrayList<>();
            long deadline = acquired + T.toMillis();
            while (later.isEmpty() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(100))) {
                    later.add(r);
                    b.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
            out.put("after_ms", System.currentTimeMillis() - acquired);
            out.put("other", describe(later));
            out.put("other_commit", commitErrors(b.commitSync(T)));
        }
        return out;
    }

    /** Two members of one group on one partition: every record once, none to both. */
    static Map<String, Object> shareTwoMembers() throws Exception {
        String topic = prefix + "-s2", group = prefix + "-s2";
        setup(topic, 1, group, Map.of());
        int n = 200;
        List<String> values = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            values.add("v" + i);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        // Small fetches: a member acquires at most max.poll.records records at a time.
        Map<String, String> small = Map.of("max.poll.records", "10");
        try (KafkaShareConsumer<String, String> a = shareConsumer(group, "explicit", small);
             KafkaShareConsumer<String, String> b = shareConsumer(group, "explicit", small)) {
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            // Both members are in the group, with the partition assigned, before the records exist.
            long deadline = System.currentTimeMillis() + T.toMillis();
            try (Admin admin = admin(plain)) {
                int ready = 0;
                while (ready < 2 && System.currentTimeMillis() < deadline) {
                    a.poll(Duration.ofMillis(100));
                    b.poll(Duration.ofMillis(100));
                    ready = 0;
                    try {
                        for (ShareMemberDescription m : admin.describeShareGroups(List.of(group))
                                 .describedGroups().get(group).get().members()) {
                            if (!m.assignment().topicPartitions().isEmpty()) {
                                ready++;
                            }
                        }
                    } catch (ExecutionException e) {
                        // GroupIdNotFoundException until the first member has joined.
                    }
                }
                out.put("members_assigned", ready);
            }
            Set<Long> union = java.util.concurrent.ConcurrentHashMap.newKeySet();
            ExecutorService two = Executors.newFixedThreadPool(2);
            try {
                List<Future<List<Long>>> fs = new ArrayList<>();
                for (KafkaShareConsumer<String, String> c : List.of(a, b)) {
                    fs.add(two.submit(() -> {
                        List<Long> mine = new ArrayList<>();
                        long end = System.currentTimeMillis() + 30_000;
                        long quietUntil = Long.MAX_VALUE;
                        while (System.currentTimeMillis() < Math.min(end, quietUntil)) {
                            ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(100));
                            for (ConsumerRecord<String, String> r : rs) {
                                mine.add(r.offset());
                                union.add(r.offset());
                                c.acknowledge(r, AcknowledgeType.ACCEPT);
                                // Slow members: each record takes a moment, so both get work.
                                Thread.sleep(5);
                            }
                            if (!rs.isEmpty()) {
                                c.commitSync(T);
                            }
                            if (union.size() >= n && quietUntil == Long.MAX_VALUE) {
                                quietUntil = System.currentTimeMillis() + 1500;
                            }
                        }
                        return mine;
                    }));
                }
                // One record per batch, while both members poll: a share partition hands out
                // whole batches, so one batch of everything would go to one member (in Kafka too).
                try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(plain))) {
                    for (String v : values) {
                        p.send(new ProducerRecord<>(topic, 0, null, v)).get(15, TimeUnit.SECONDS);
                    }
                }
                List<Long> ofA = fs.get(0).get(60, TimeUnit.SECONDS);
                List<Long> ofB = fs.get(1).get(60, TimeUnit.SECONDS);
                Set<Long> both = new HashSet<>(ofA);
                both.retainAll(ofB);
                out.put("count_a", ofA.size());
                out.put("count_b", ofB.size());
                out.put("distinct", union.size());
                out.put("to_both", new ArrayList<>(both));
                out.put("dup_a", ofA.size() - new HashSet<>(ofA).size());
                out.put("dup_b", ofB.size() - new HashSet<>(ofB).size());
            } finally {
                two.shutdownNow();
            }
        }
        out.put("produced", n);
        return out;
    }

    /** Closing a member with records acquired and unacknowledged hands them to another member at once. */
    static Map<String, Object> shareCloseReleases() throws Exception {
        String topic = prefix + "-sc", group = prefix + "-sc";
        setup(topic, 1, group, Map.of("share.record.lock.duration.ms", "60000"));
        produce(topic, 0, List.of("r0", "r1", "r2", "r3", "r4"));
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaShareConsumer<String, String> a = shareConsumer(group, "explicit", Map.of());
        a.subscribe(List.of(topic));
        out.put("held", describe(collectShare(a, 5, T.toMillis())));
        a.close(T);
        long closed = System.currentTimeMillis();
        try (KafkaShareConsumer<String, String> b = shareConsumer(group, "implicit", Map.of())) {
            b.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = collectShare(b, 5, 20_000);
            out.put("after_ms", System.currentTimeMillis() - closed);
            out.put("next", describe(got));
        }
        return out;
    }

    // ------------------------------------------------------------------ consumer groups

    /** A KafkaConsumer of the given group.protocol consumes, commits, and a successor resumes. */
    static Map<String, Object> consumerGroup(String protocol) throws Exception {
        String topic = prefix + "-cg-" + protocol, group = prefix + "-cg-" + protocol;
        createTopic(topic, 2, Map.of());
        List<String> first = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            first.add("first-" + i);
        }
        produceSpread(topic, 2, first);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> c = consumer(group, protocol, "read_uncommitted");
             Admin admin = admin(plain)) {
            c.subscribe(List.of(topic));
            out.put("first", values(collect(c, 10, T.toMillis())));
            c.commitSync(T);
            Map<TopicPartition, OffsetAndMetadata> committed =
                c.committed(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)), T);
            out.put("committed_total", committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get();
            out.put("type", d.type().toString());
            out.put("state", d.groupState().toString());
            List<String> assigned = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    assigned.add(tp.toString());
                }
            }
            assigned.sort(null);
            out.put("assigned", assigned);
            Collection<GroupListing> listed = admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get();
            for (GroupListing l : listed) {
                if (l.groupId().equals(group)) {
                    out.put("listed_type", l.type().map(Object::toString).orElse(null));
                    out.put("listed_protocol", l.protocol());
                }
            }
        }
        produceSpread(topic, 2, List.of("second-0", "second-1", "second-2"));
        try (KafkaConsumer<String, String> c = consumer(group, protocol, "read_uncommitted");
             Admin admin = admin(plain)) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = collect(c, 3, T.toMillis());
            got.addAll(drain(c, 1000));
            out.put("resumed", values(got));
            c.commitSync(T);
            c.close();
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get();
            out.put("offsets_total", offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
            out.put("state_after_close", admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get().groupState().toString());
        }
        return out;
    }

    /**
     * A rolling switch from group.protocol=classic to consumer: a consumer-protocol member joins
     * a group whose classic member is still consuming. Apache Kafka 4.1 (migration policy
     * bidirectional by default) upgrades the group and assigns one partition to each member;
     * so does Shoal (test_rolling_switch_from_classic_to_consumer).
     */
    static Map<String, Object> consumerRollingSwitch() throws Exception {
        String topic = prefix + "-roll", group = prefix + "-roll";
        createTopic(topic, 2, Map.of());
        List<String> first = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            first.add("first-" + i);
        }
        produceSpread(topic, 2, first);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> old = consumer(group, "classic", "read_uncommitted");
             KafkaConsumer<String, String> upgraded = consumer(group, "consumer", "read_uncommitted");
             Admin admin = admin(plain)) {
            old.subscribe(List.of(topic));
            out.put("classic_first", values(collect(old, 6, T.toMillis())));
            old.commitSync(T);
            upgraded.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + T.toMillis();
            String err = null;
            while (System.currentTimeMillis() < deadline
                   && (old.assignment().size() + upgraded.assignment().size() != 2
                       || old.assignment().isEmpty() || upgraded.assignment().isEmpty())) {
                try {
                    old.poll(Duration.ofMillis(100));
                    upgraded.poll(Duration.ofMillis(100));
                } catch (KafkaException e) {
                    err = e.getClass().getSimpleName() + ": " + e.getMessage();
                    break;
                }
            }
            out.put("join_error", err);
            out.put("classic_assigned", old.assignment().size());
            out.put("consumer_assigned", upgraded.assignment().size());
            out.put("type_mixed", admin.describeConsumerGroups(List.of(group)).describedGroups()
                .get(group).get().type().toString());
        }
        return out;
    }

    // ------------------------------------------------------------------ transactions

    /** Committed transactions are visible to read_committed, aborted ones only to read_uncommitted. */
    static Map<String, Object> txnReadCommitted() throws Exception {
        String topic = prefix + "-tx";
        createTopic(topic, 1, Map.of());
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> p = txnProducer(prefix + "-tx-id")) {
            p.initTransactions();
            p.beginTransaction();
            for (String v : List.of("c0", "c1", "c2")) {
                p.send(new ProducerRecord<>(topic, 0, null, v));
            }
            p.commitTransaction();
            p.beginTransaction();
            for (String v : List.of("a0", "a1")) {
                p.send(new ProducerRecord<>(topic, 0, null, v));
            }
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "c3"));
            // The consume-transform-produce step: a group's offsets commit with the transaction.
            p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(3)),
                new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(prefix + "-tx-group"));
            p.commitTransaction();
        }
        try (Admin admin = admin(plain)) {
            // Transaction version 2 ends every transaction with an epoch bump: 3 after three.
            out.put("producer_epoch", admin.describeTransactions(List.of(prefix + "-tx-id"))
                .description(prefix + "-tx-id").get().producerEpoch());
            // requireStable: commitTransaction returns once the coordinator has decided, and
            // the commit marker reaches the group's coordinator after (on a cluster, another
            // broker): until then the offset is pending, and a stable read waits it out
            // (UNSTABLE_OFFSET_COMMIT, retried by the client) where a plain read misses it.
            out.put("group_offset", admin.listConsumerGroupOffsets(prefix + "-tx-group",
                    new org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions().requireStable(true))
                .partitionsToOffsetAndMetadata().get().get(new TopicPartition(topic, 0)).offset());
        }
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> c = consumer(null, "classic", iso)) {
                TopicPartition tp = new TopicPartition(topic, 0);
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                int want = iso.equals("read_committed") ? 4 : 6;
                List<ConsumerRecord<String, String>> got = collect(c, want, T.toMillis());
                got.addAll(drain(c, 1000));
                out.put(iso, values(got));
                out.put(iso + "_end", c.position(tp, T));
            }
        }
        return out;
    }

    /** A second producer with the same transactional.id fences the first (the zombie). */
    static Map<String, Object> txnFencing() throws Exception {
        String topic = prefix + "-tf", tid = prefix + "-tf-id";
        createTopic(topic, 1, Map.of());
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<String, String> zombie = txnProducer(tid);
        try {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
            try (KafkaProducer<String, String> fresh = txnProducer(tid)) {
                fresh.initTransactions();
                try {
                    zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-2")).get(15, TimeUnit.SECONDS);
                    out.put("zombie_send", "ok");
                } catch (ExecutionException e) {
                    out.put("zombie_send", e.getCause().getClass().getSimpleName());
                } catch (KafkaException e) {
                    out.put("zombie_send", e.getClass().getSimpleName());
                }
                try {
                    zombie.commitTransaction();
                    out.put("zombie_commit", "ok");
                } catch (KafkaException e) {
                    out.put("zombie_commit", e.getClass().getSimpleName());
                }
                // What an application does with an abortable error: abort. The zombie's EndTxn
                // carries the old epoch, so the coordinator fences it for good.
                try {
                    zombie.abortTransaction();
                    out.put("zombie_abort", "ok");
                } catch (KafkaException e) {
                    out.put("zombie_abort", e.getClass().getSimpleName());
                }
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, 0, null, "fresh"));
                fresh.commitTransaction();
            }
        } finally {
            zombie.close(Duration.ZERO);
        }
        // A zombie that produced only before the fence learns of it from its EndTxn.
        KafkaProducer<String, String> quiet = txnProducer(tid);
        try {
            quiet.initTransactions();
            quiet.beginTransaction();
            quiet.send(new ProducerRecord<>(topic, 0, null, "quiet-zombie")).get();
            try (KafkaProducer<String, String> fresh = txnProducer(tid)) {
                fresh.initTransactions();
                try {
                    quiet.commitTransaction();
                    out.put("quiet_commit", "ok");
                } catch (KafkaException e) {
                    out.put("quiet_commit", e.getClass().getSimpleName());
                }
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, 0, null, "fresh-2"));
                fresh.commitTransaction();
            }
        } finally {
            quiet.close(Duration.ZERO);
        }
        try (KafkaConsumer<String, String> c = consumer(null, "classic", "read_committed")) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = collect(c, 2, T.toMillis());
            got.addAll(drain(c, 1000));
            out.put("read_committed", values(got));
        }
        return out;
    }

    /**
     * The consume-transform-produce loop over six partitions (on a cluster: led by different
     * brokers, with the transaction and group coordinators wherever their keys fall): one
     * aborted transaction writes to every output partition first, then a read_committed
     * KafkaConsumer of a group (consumer protocol) and a transactional producer copy 60 input
     * records, each poll's output and its offsets committed in one transaction.
     */
    static Map<String, Object> txnConsumeTransformProduce() throws Exception {
        String in = prefix + "-ctp-in", outTopic = prefix + "-ctp-out";
        String group = prefix + "-ctp-group", tid = prefix + "-ctp-id";
        int parts = 6, n = 60;
        createTopic(in, parts, Map.of());
        createTopic(outTopic, parts, Map.of());
        List<String> inputs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            inputs.add("in-" + i);
        }
        produceSpread(in, parts, inputs);
        Map<String, Object> out = new LinkedHashMap<>();
        int transactions = 0, copied = 0;
        try (KafkaConsumer<String, String> c = consumer(group, "consumer", "read_committed");
             KafkaProducer<String, String> p = txnProducer(tid)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < parts; i++) {
                p.send(new ProducerRecord<>(outTopic, i, null, "aborted-" + i));
            }
            p.flush();
            p.abortTransaction();
            c.subscribe(List.of(in));
            long deadline = System.currentTimeMillis() + 4 * T.toMillis();
            while (copied < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                if (rs.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : rs) {
                    p.send(new ProducerRecord<>(outTopic, r.partition(), null,
                                                r.value().replace("in-", "out-")));
                    offsets.put(new TopicPartition(in, r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    copied++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                transactions++;
            }
        }
        out.put("copied", copied);
        out.put("transactions", transactions);
        try (Admin admin = admin(plain)) {
            out.put("txn_coordinator", admin.describeTransactions(List.of(tid))
                .description(tid).get().coordinatorId());
            out.put("group_coordinator", admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get().coordinator().id());
            List<Integer> leaders = new ArrayList<>();
            admin.describeTopics(List.of(outTopic)).allTopicNames().get().get(outTopic)
                .partitions().forEach(pi -> leaders.add(pi.leader().id()));
            out.put("output_leaders", leaders);
            long committed = 0;
            for (OffsetAndMetadata om : admin.listConsumerGroupOffsets(group)
                     .partitionsToOffsetAndMetadata().get().values()) {
                committed += om.offset();
            }
            out.put("committed_offsets_total", committed);
        }
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> c = consumer(null, "classic", iso)) {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < parts; i++) {
                    tps.add(new TopicPartition(outTopic, i));
                }
                c.assign(tps);
                c.seekToBeginning(tps);
                int want = iso.equals("read_committed") ? n : n + parts;
                List<ConsumerRecord<String, String>> got = collect(c, want, 2 * T.toMillis());
                got.addAll(drain(c, 1000));
                List<String> vals = values(got);
                vals.sort(null);
                out.put(iso, vals);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ admin

    /** Share groups through Admin: list, describe, offsets listed, altered, deleted; group deleted. */
    static Map<String, Object> adminShareGroups() throws Exception {
        String topic = prefix + "-as", group = prefix + "-as";
        setup(topic, 1, group, Map.of());
        List<String> values = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            values.add("m" + i);
        }
        produce(topic, 0, values);
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(plain)) {
            try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit",
                     Map.of("client.id", prefix + "-as-client"))) {
                c.subscribe(List.of(topic));
                out.put("consumed", values(collectShare(c, 10, T.toMillis())));
                c.commitSync(T);
                out.put("listed", listedTypes(admin, ListGroupsOptions.forShareGroups(), group));
                ShareGroupDescription d = admin.describeShareGroups(List.of(group))
                    .describedGroups().get(group).get();
                out.put("state", d.groupState().toString());
                List<Object> members = new ArrayList<>();
                for (ShareMemberDescription m : d.members()) {
                    members.add(Map.of("client_id", m.clientId(),
                        "partitions", m.assignment().topicPartitions().stream()
                            .map(Object::toString).sorted().collect(Collectors.toList())));
                }
                out.put("members", members);
                out.put("offsets_live", shareOffsets(admin, group, tp));
            }
            out.put("state_after_close", admin.describeShareGroups(List.of(group))
                .describedGroups().get(group).get().groupState().toString());
            admin.alterShareGroupOffsets(group, Map.of(tp, 3L)).all().get();
            out.put("offsets_altered", shareOffsets(admin, group, tp));
            try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit", Map.of())) {
                c.subscribe(List.of(topic));
                List<ConsumerRecord<String, String>> got = collectShare(c, 7, T.toMillis());
                got.addAll(drainShare(c, 1000));
                out.put("after_alter", values(got));
            }
            admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
            out.put("offsets_deleted", shareOffsets(admin, group, tp));
            admin.deleteShareGroups(List.of(group)).all().get();
            out.put("listed_after_delete", listedTypes(admin, ListGroupsOptions.forShareGroups(), group));
        }
        return out;
    }

    /** describeConfigs / incrementalAlterConfigs on a topic and a group; a bad value is refused. */
    static Map<String, Object> adminConfigs() throws Exception {
        String topic = prefix + "-ac", group = prefix + "-ac";
        createTopic(topic, 1, Map.of("retention.ms", "3600000"));
        ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(plain)) {
            out.put("created", entry(admin, t, "retention.ms"));
            out.put("default", entry(admin, t, "cleanup.policy"));
            admin.incrementalAlterConfigs(Map.of(t, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                .all().get();
            out.put("set", entry(admin, t, "retention.ms"));
            out.put("appended", entry(admin, t, "cleanup.policy"));
            admin.incrementalAlterConfigs(Map.of(t, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
                .all().get();
            out.put("deleted", entry(admin, t, "retention.ms"));
            try {
                admin.incrementalAlterConfigs(Map.of(t, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get();
                out.put("bad_value", "accepted");
            } catch (ExecutionException e) {
                out.put("bad_value", e.getCause().getClass().getSimpleName());
            }
            admin.incrementalAlterConfigs(Map.of(g, List.of(new AlterConfigOp(
                new ConfigEntry("share.record.lock.duration.ms", "20000"), AlterConfigOp.OpType.SET))))
                .all().get();
            out.put("group", entry(admin, g, "share.record.lock.duration.ms"));
        }
        return out;
    }

    /**
     * SCRAM users and ACLs end to end: a user created with alterUserScramCredentials logs in on
     * the SASL listener, is refused a topic until an ACL allows it, and cannot log in once its
     * credential is deleted.
     */
    /**
     * What kafka-topics --describe, kafka-transactions (describe-producers, abort), kafka-log-dirs
     * and kafka-configs --describe --entity-type groups read through Admin: DescribeTopicPartitions
     * paged two partitions at a time, DescribeProducers with an open transaction, abortTransaction
     * (WriteTxnMarkers; ANONYMOUS is a super user here), DescribeLogDirs and ListConfigResources.
     */
    static Map<String, Object> adminTools() throws Exception {
        String topic = prefix + "-tools", group = prefix + "-tools-g";
        createTopic(topic, 3, Map.of());
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(plain);
             KafkaProducer<String, String> p = txnProducer(prefix + "-tools-tx")) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 1, "k", "open")).get();
            p.flush();
            org.apache.kafka.clients.admin.TopicDescription d = admin.describeTopics(List.of(topic),
                new org.apache.kafka.clients.admin.DescribeTopicsOptions().partitionSizeLimitPerResponse(2))
                .allTopicNames().get().get(topic);
            out.put("partitions", d.partitions().stream().map(x -> x.partition() + ":" + x.leader().id())
                .collect(Collectors.toList()));
            TopicPartition tp = new TopicPartition(topic, 1);
            List<org.apache.kafka.clients.admin.ProducerState> ps =
                admin.describeProducers(List.of(tp)).all().get().get(tp).activeProducers();
            org.apache.kafka.clients.admin.ProducerState s = ps.get(0);
            out.put("producers", ps.size());
            out.put("epoch", (int) s.producerEpoch());
            out.put("last_sequence", s.lastSequence());
            out.put("txn_start", s.currentTransactionStartOffset().orElse(-1));
            admin.abortTransaction(new org.apache.kafka.clients.admin.AbortTransactionSpec(
                tp, s.producerId(), (short) s.producerEpoch(), s.coordinatorEpoch().orElse(0))).all().get();
            out.put("txn_start_after_abort", admin.describeProducers(List.of(tp)).all().get().get(tp)
                .activeProducers().get(0).currentTransactionStartOffset().orElse(-1));
            int node = admin.describeCluster().nodes().get().iterator().next().id();
            Map<String, org.apache.kafka.clients.admin.LogDirDescription> dirs =
                admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node);
            String dir = dirs.keySet().iterator().next();
            org.apache.kafka.clients.admin.ReplicaInfo r = dirs.get(dir).replicaInfos().get(tp);
            out.put("log_dir", dir);
            out.put("size_positive", r.size() > 0);
            out.put("offset_lag", r.offsetLag());
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group),
                List.of(new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", "20000"),
                    AlterConfigOp.OpType.SET)))).all().get();
            out.put("group_listed", admin.listConfigResources(Set.of(ConfigResource.Type.GROUP),
                new org.apache.kafka.clients.admin.ListConfigResourcesOptions()).all().get()
                .contains(new ConfigResource(ConfigResource.Type.GROUP, group)));
            p.close(Duration.ZERO);
        }
        return out;
    }

    static Map<String, Object> adminAclsScram() throws Exception {
        String topic = prefix + "-acl", user = prefix + "-alice";
        createTopic(topic, 1, Map.of());
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(plain)) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "alice-secret")))
                .all().get();
            Map<String, UserScramCredentialsDescription> users =
                admin.describeUserScramCredentials(List.of(user)).all().get();
            List<String> creds = new ArrayList<>();
            for (ScramCredentialInfo i : users.get(user).credentialInfos()) {
                creds.add(i.mechanism() + ":" + i.iterations());
            }
            out.put("scram", creds);
            out.put("produce_without_acl", aliceProduce(topic, user, "alice-secret", "before"));
            AclBinding write = new AclBinding(
                new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                new AccessControlEntry("User:" + user, "*", AclOperation.WRITE, AclPermissionType.ALLOW));
            admin.createAcls(List.of(write)).all().get();
            AclBindingFilter mine = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.ANY, null, PatternType.ANY),
                new AccessControlEntryFilter("User:" + user, null, AclOperation.ANY, AclPermissionType.ANY));
            out.put("described", admin.describeAcls(mine).values().get().stream()
                .map(ShoalJavaClients::aclText).sorted().collect(Collectors.toList()));
            out.put("produce_with_acl", aliceProduce(topic, user, "alice-secret", "after"));
            out.put("deleted", admin.deleteAcls(List.of(mine)).all().get().stream()
                .map(ShoalJavaClients::aclText).sorted().collect(Collectors.toList()));
            out.put("described_after_delete", admin.describeAcls(mine).values().get().size());
            out.put("produce_after_delete", aliceProduce(topic, user, "alice-secret", "gone"));
            out.put("wrong_password", aliceProduce(topic, user, "not-the-secret", "x"));
            admin.alterUserScramCredentials(List.of(
                new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256))).all().get();
            out.put("described_after_user_delete",
                admin.describeUserScramCredentials().all().get().containsKey(user));
            out.put("produce_after_user_delete", aliceProduce(topic, user, "alice-secret", "y"));
        }
        try (KafkaConsumer<String, String> c = consumer(null, "classic", "read_uncommitted")) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = drain(c, 2000);
            out.put("topic", values(got));
        }
        return out;
    }

    static String aliceProduce(String topic, String user, String password, String value) {
        Properties p = producerProps(sasl);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-256");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
            + "username=\"" + user + "\" password=\"" + password + "\";");
        p.put("max.block.ms", "8000");
        p.put("delivery.timeout.ms", "8000");
        p.put("request.timeout.ms", "5000");
        p.put("enable.idempotence", "false");
        p.put("retries", "0");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            prod.send(new ProducerRecord<>(topic, 0, null, value)).get(10, TimeUnit.SECONDS);
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static String aclText(AclBinding b) {
        return b.pattern().resourceType() + ":" + b.pattern().patternType() + ":" + b.pattern().name()
            + " " + b.entry().principal() + " " + b.entry().operation() + " " + b.entry().permissionType();
    }

    static Object entry(Admin admin, ConfigResource r, String name) throws Exception {
        Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
        ConfigEntry e = c.get(name);
        if (e == null) {
            return null;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("value", e.value());
        m.put("source", e.source().toString());
        return m;
    }

    static Object shareOffsets(Admin admin, String group, TopicPartition tp) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> m = admin.listShareGroupOffsets(
                Map.of(group, new ListShareGroupOffsetsSpec()))
            .partitionsToOffsetAndMetadata(group).get();
        OffsetAndMetadata o = m.get(tp);
        return o == null ? null : o.offset();
    }

    static List<String> listedTypes(Admin admin, ListGroupsOptions opts, String group) throws Exception {
        List<String> out = new ArrayList<>();
        for (GroupListing l : admin.listGroups(opts).all().get()) {
            if (l.groupId().equals(group)) {
                out.add(l.type().map(Object::toString).orElse("?") + "/"
                    + l.groupState().map(Object::toString).orElse("?"));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ helpers

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "15000");
        return Admin.create(p);
    }

    static void createTopic(String topic, int partitions, Map<String, String> configs) throws Exception {
        try (Admin admin = admin(plain)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
                .all().get();
        }
    }

    /** A topic and its share group's configs (earliest reset plus {@code extra}). */
    static void setup(String topic, int partitions, String group, Map<String, String> extra) throws Exception {
        createTopic(topic, partitions, Map.of());
        Map<String, String> configs = new HashMap<>(extra);
        configs.put("share.auto.offset.reset", "earliest");
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> e : configs.entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET));
        }
        try (Admin admin = admin(plain)) {
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops))
                .all().get();
        }
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        return p;
    }

    static void produce(String topic, int partition, List<String> values) throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(plain))) {
            List<Future<?>> fs = new ArrayList<>();
            for (String v : values) {
                fs.add(p.send(new ProducerRecord<>(topic, partition, null, v)));
            }
            for (Future<?> f : fs) {
                f.get(15, TimeUnit.SECONDS);
            }
        }
    }

    static void produceSpread(String topic, int partitions, List<String> values) throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(plain))) {
            for (int i = 0; i < values.size(); i++) {
                p.send(new ProducerRecord<>(topic, i % partitions, null, values.get(i))).get(15, TimeUnit.SECONDS);
            }
        }
    }

    static KafkaProducer<String, String> txnProducer(String tid) {
        Properties p = producerProps(plain);
        p.put("transactional.id", tid);
        p.put("max.block.ms", "15000");
        p.put("transaction.timeout.ms", "60000");
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String group, String protocol, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", plain);
        if (group != null) {
            p.put("group.id", group);
            p.put("group.protocol", protocol);
        }
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", isolation);
        return new KafkaConsumer<>(p);
    }

    static KafkaShareConsumer<String, String> shareConsumer(String group, String mode, Map<String, String> extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", plain);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", mode);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.putAll(extra);
        return new KafkaShareConsumer<>(p);
    }

    static List<ConsumerRecord<String, String>> collect(KafkaConsumer<String, String> c, int want, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            c.poll(Duration.ofMillis(200)).forEach(got::add);
        }
        return got;
    }

    static List<ConsumerRecord<String, String>> drain(KafkaConsumer<String, String> c, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < deadline) {
            c.poll(Duration.ofMillis(100)).forEach(got::add);
        }
        return got;
    }

    /** Poll until {@code want} records (implicit mode acknowledges them on the next poll). */
    static List<ConsumerRecord<String, String>> collectShare(KafkaShareConsumer<String, String> c, int want, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            c.poll(Duration.ofMillis(200)).forEach(got::add);
        }
        return got;
    }

    static List<ConsumerRecord<String, String>> drainShare(KafkaShareConsumer<String, String> c, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < deadline) {
            c.poll(Duration.ofMillis(100)).forEach(got::add);
        }
        return got;
    }

    static List<Object> describe(List<ConsumerRecord<String, String>> rs) {
        List<Object> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : rs) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("offset", r.offset());
            m.put("value", r.value());
            Optional<Short> dc = r.deliveryCount();
            m.put("delivery_count", dc.isPresent() ? (Object) (int) dc.get() : null);
            out.add(m);
        }
        return out;
    }

    static List<String> values(List<ConsumerRecord<String, String>> rs) {
        List<String> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : rs) {
            out.add(r.value());
        }
        return out;
    }

    static Map<String, Object> commitErrors(Map<TopicIdPartition, Optional<KafkaException>> m) {
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : m.entrySet()) {
            out.put(e.getKey().topicPartition().toString(),
                e.getValue().map(x -> (Object) x.getClass().getSimpleName()).orElse(null));
        }
        return out;
    }

    static String json(Object o) {
        if (o == null) {
            return "null";
        }
        if (o instanceof Number || o instanceof Boolean) {
            return o.toString();
        }
        if (o instanceof Map<?, ?> m) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (sb.length() > 1) {
                    sb.append(", ");
                }
                sb.append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (o instanceof Collection<?> c) {
            return "[" + c.stream().map(ShoalJavaClients::json).collect(Collectors.joining(", ")) + "]";
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (ch < 0x20) {
                        sb.append(String.format("\\u%04x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }
}
