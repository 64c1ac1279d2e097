/*
 * The real Apache BookKeeper Java client, driven by bkaudit's tests and benchmarks.
 *
 * Client mode: `BkDriver client --uri zk+hierarchical://HOST:PORT/ROOT [--set key=value ...]` reads one JSON
 * command per line on stdin and answers one JSON line on stdout, so one JVM serves a whole test (starting a JVM
 * costs a second). `--set` passes ClientConfiguration keys, e.g. useV2WireProtocol=true (Pulsar brokers' default),
 * TLS settings, addEntryTimeout. Commands ("op"):
 *   create  {ensemble, wq, aq, digest, password, metadata: {key: utf-8 text}, entries, size, close}
 *   add     {ledger, entries, size}            on a ledger this process created and left open
 *   close   {ledger}
 *   read    {ledger, digest, password, recovery}  open (with recovery or not), read 0..LAC, check each payload
 *   lac     {ledger, digest, password}         readLastAddConfirmed through a no-recovery handle
 *   bulk    {count, ensemble, wq, aq, digest, password, entries, size, open_every, inflight, metadata, describe}
 *           {closed: [id], open: [id], ledgers: [as create answers] when describe}: `count` ledgers written at
 *           once (at most `inflight` in flight), every `open_every`-th left open in this process
 *   extend  {entries, size, keep_open_every, inflight}  {ledgers: [as create answers]}: `entries` more on every
 *           ledger this process holds open, then closed but every `keep_open_every`-th (a bookie stopped
 *           meanwhile is replaced by the client: a new segment, as in production)
 *   list    {bookie, ledger, timeout_ms, upto} BookKeeperAdmin.asyncGetListOfEntriesOfLedger (ids 0..upto)
 *   delete  {ledger}
 * The under-replication queue through BookKeeper's own ZkLedgerUnderreplicationManager (what its Auditor and
 * ReplicationWorker call), so a test can write markers and locks exactly as Java AutoRecovery does:
 *   urmark    {ledger, replicas: [bookie id]}  markLedgerUnderreplicatedAsync (the Auditor's publish)
 *   urlock    {ledger}    acquireUnderreplicatedLedger: the EPHEMERAL lock, held by this JVM's session
 *   urrelease {ledger}    releaseUnderreplicatedLedger
 *   urinfo    {ledger}    {marked, replicas, ctime, worker}: getLedgerUnreplicationInfo and the lock holder
 *                         (getReplicationWorkerIdRereplicatingLedger)
 *   check     {ledger, percentage}  {fragments: [{first, last, bookies}]}: BookKeeper's LedgerChecker (what its
 *                         Auditor and ReplicationWorker run) on a no-recovery handle, reading `percentage` of
 *                         each fragment (0: the first and last entry each bookie stores), as Java sees holes
 *   auditor   {}          {auditor: bookie id or null}: BookKeeperAdmin.getCurrentAuditor, what `shell
 *                         whoisauditor` prints, without a JVM per question
 *   readbookie {bookie, reads: [[ledger, entry]]}  {failed: [[ledger, entry, rc]]}: each entry read from that
 *                         one bookie through BookieClientImpl, as `shell readledger --bookieid` does (only the
 *                         reads that did not answer OK are listed)
 *   loadadd   {ledgers, entries, size, ensemble, wq, aq, inflight}  {ledgers: [id], ops, seconds}: `ledgers`
 *                         ledgers created (untimed), then `entries` appends to each, at most `inflight` adds
 *                         outstanding over all of them, timed from the first add to the last acknowledgement
 *                         (AQ), then closed (untimed)
 *   loadread  {ledgers: [id], batch, inflight, digest, password}  {ops, seconds}: every entry read back
 *                         through no-recovery handles, `batch` entries a readAsync, `inflight` reads outstanding
 *   loadlist  {ledgers: [id], inflight}  {ops, seconds}: GetListOfEntriesOfLedger of every ledger from every
 *                         bookie of its ensembles (BookKeeperAdmin), `inflight` outstanding
 *   urlist    {}          {ledgers: {id: [bookie id]}}: listLedgersToRereplicate(null), every marker and its
 *                         missing replicas, as BookKeeper's own `listunderreplicated` walks them
 *   quit
 * Every answer is {"ok": true, ...} or {"ok": false, "error": "...", "code": BKException code or null}.
 *
 * Auditor mode: `BkDriver auditor --conf bk_server.conf --id BOOKIE_ID` runs BookKeeper's own Auditor
 * (`new Auditor(id, conf, NullStatsLogger)`, then `start()`: the object AuditorElector starts once elected) with
 * that configuration's check intervals, until stdin closes; its log lines (Starting/Completed checkAllLedgers,
 * ReplicasCheck) go to stderr. No ReplicationWorker beside it (AutoRecoveryMain's other half), so what the
 * Auditor marks stays marked: a benchmark measures the checks, not a repair between two runs.
 *
 * Damage mode (a stopped bookie's files, through BookKeeper's own storage formats):
 *   BkDriver damage --storage db|interleaved --ledger-dir DIR/current (--ledger L (--entries 1,2,3 | --forget)
 *                   | --plan FILE)
 * A plan is one ledger a line, `L forget` or `L 1,2,3`, applied in one process (one RocksDB open).
 * db: deletes the (ledger, entry) keys from DbLedgerStorage's RocksDB "locations" index (16 bytes, big-endian,
 * LongPairWrapper), or with --forget every key of the ledger and its "ledgers" record (LedgerMetadataIndex);
 * interleaved (also SortedLedgerStorage): zeroes the 8-byte entry offsets in the ledger's index file
 * (IndexPersistenceMgr.getLedgerName, FileInfo.START_OF_DATA = 1024), or with --forget deletes the index file.
 *
 * Entry payloads are a rule both ends know: 16 bytes of ledger id and entry id (big-endian), then byte i is
 * (ledgerId * 31 + entryId * 17 + i) & 0xff. A reader checks every payload it reads against it.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.bookie.storage.ldb.KeyValueStorage;
import org.apache.bookkeeper.bookie.storage.ldb.KeyValueStorageFactory.DbConfigType;
import org.apache.bookkeeper.bookie.storage.ldb.KeyValueStorageRocksDB;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerChecker;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerFragment;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.meta.LedgerUnderreplicationManager;
import org.apache.bookkeeper.meta.UnderreplicatedLedger;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger;

public final class BkDriver {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final BookKeeper bk;
    private final ClientConfiguration conf;
    private final Map<Long, LedgerHandle> open = new ConcurrentHashMap<>();
    private BookKeeperAdmin admin;
    private LedgerUnderreplicationManager underreplication;
    private org.apache.bookkeeper.proto.BookieClient bookieClient;

    private BkDriver(ClientConfiguration conf) throws Exception {
        this.conf = conf;
        this.bk = new BookKeeper(conf);
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: BkDriver client|damage ...");
            System.exit(2);
        }
        Map<String, List<String>> opts = parse(args);
        if (args[0].equals("damage")) {
            damage(opts);
            return;
        }
        if (args[0].equals("auditor")) {
            auditorMode(opts);
            return;
        }
        if (!args[0].equals("client")) {
            System.err.println("unknown mode " + args[0]);
            System.exit(2);
        }
        // answers go to the real stdout; anything the client logs goes to stderr
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(one(opts, "uri"));
        for (String kv : opts.getOrDefault("set", List.of())) {
            int eq = kv.indexOf('=');
            conf.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
        }
        BkDriver driver = new BkDriver(conf);
        out.println("{\"ok\":true,\"ready\":true}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer;
            JsonNode cmd = null;
            try {
                cmd = JSON.readTree(line);
                if (cmd.path("op").asText().equals("quit")) {
                    out.println("{\"ok\":true}");
                    break;
                }
                answer = driver.handle(cmd);
                answer.put("ok", true);
            } catch (Throwable t) {
                answer = JSON.createObjectNode();
                answer.put("ok", false);
                answer.put("error", t.getClass().getSimpleName() + ": " + t.getMessage());
                Throwable cause = t;
                while (cause != null && !(cause instanceof BKException)) {
                    cause = cause.getCause();
                }
                if (cause != null) {
                    answer.put("code", ((BKException) cause).getCode());
                } else {
                    answer.putNull("code");
                }
            }
            out.println(JSON.writeValueAsString(answer));
        }
        driver.shutdown();
        out.flush();
        System.exit(0);
    }

    private void shutdown() {
        for (LedgerHandle lh : open.values()) {
            try {
                lh.close();
            } catch (Exception ignored) {
                // a test may have left it open on purpose; the process ends anyway
            }
        }
        try {
            if (admin != null) {
                admin.close();
            }
            if (underreplication != null) {
                underreplication.close();
            }
            if (bookieClient != null) {
                bookieClient.close();
            }
            bk.close();
        } catch (Exception ignored) {
            // shutting down
        }
    }

    private ObjectNode handle(JsonNode cmd) throws Exception {
        switch (cmd.path("op").asText()) {
            case "create":
                return create(cmd);
            case "add":
                return add(cmd);
            case "close":
                return close(cmd);
            case "read":
                return read(cmd);
            case "lac":
                return lac(cmd);
            case "bulk":
                return bulk(cmd);
            case "extend":
                return extend(cmd);
            case "urlist":
                return urlist();
            case "readbookie":
                return readBookie(cmd);
            case "loadadd":
                return loadAdd(cmd);
            case "loadread":
                return loadRead(cmd);
            case "loadlist":
                return loadList(cmd);
            case "list":
                return list(cmd);
            case "urmark":
            case "urlock":
            case "urrelease":
            case "urinfo":
                return queue(cmd);
            case "auditor":
                return auditor();
            case "check":
                return check(cmd);
            case "delete":
                bk.deleteLedger(cmd.path("ledger").asLong());
                open.remove(cmd.path("ledger").asLong());
                return JSON.createObjectNode();
            default:
                throw new IllegalArgumentException("unknown op " + cmd.path("op").asText());
        }
    }

    private static DigestType digest(JsonNode cmd) {
        return DigestType.valueOf(cmd.path("digest").asText("CRC32C"));
    }

    private static byte[] password(JsonNode cmd) {
        return cmd.path("password").asText("").getBytes(StandardCharsets.UTF_8);
    }

    private static Map<String, byte[]> metadata(JsonNode cmd) {
        Map<String, byte[]> md = new HashMap<>();
        Iterator<Map.Entry<String, JsonNode>> it = cmd.path("metadata").fields();
        while (it.hasNext()) {
            Map.Entry<String, JsonNode> e = it.next();
            md.put(e.getKey(), e.getValue().asText().getBytes(StandardCharsets.UTF_8));
        }
        return md;
    }

    static byte[] payload(long ledgerId, long entryId, int size) {
        byte[] data = new byte[size];
        for (int i = 0; i < size; i++) {
            data[i] = (byte) ((ledgerId * 31 + entryId * 17 + i) & 0xff);
        }
        if (size >= 16) {
            ByteBuffer.wrap(data).putLong(ledgerId).putLong(entryId);
        }
        return data;
    }

    private ObjectNode create(JsonNode cmd) throws Exception {
        LedgerHandle lh = bk.createLedger(cmd.path("ensemble").asInt(3), cmd.path("wq").asInt(2),
                cmd.path("aq").asInt(2), digest(cmd), password(cmd), metadata(cmd));
        open.put(lh.getId(), lh);
        write(lh, cmd.path("entries").asInt(0), cmd.path("size").asInt(64));
        if (cmd.path("close").asBoolean(true)) {
            lh.close();
            open.remove(lh.getId());
        }
        return describe(lh);
    }

    private static void write(LedgerHandle lh, int entries, int size) throws Exception {
        // pipelined like a real writer: every add in flight, then wait for all of them
        List<CompletableFuture<Long>> pending = new ArrayList<>();
        long next = lh.getLastAddPushed() + 1;
        for (int i = 0; i < entries; i++) {
            pending.add(lh.appendAsync(payload(lh.getId(), next + i, size)));
        }
        for (CompletableFuture<Long> f : pending) {
            f.get(120, TimeUnit.SECONDS);
        }
    }

    private ObjectNode add(JsonNode cmd) throws Exception {
        LedgerHandle lh = handleOf(cmd);
        write(lh, cmd.path("entries").asInt(1), cmd.path("size").asInt(64));
        return describe(lh);
    }

    private ObjectNode close(JsonNode cmd) throws Exception {
        LedgerHandle lh = handleOf(cmd);
        lh.close();
        open.remove(lh.getId());
        return describe(lh);
    }

    private LedgerHandle handleOf(JsonNode cmd) {
        LedgerHandle lh = open.get(cmd.path("ledger").asLong());
        if (lh == null) {
            throw new IllegalArgumentException("ledger " + cmd.path("ledger").asLong() + " is not open here");
        }
        return lh;
    }

    private ObjectNode read(JsonNode cmd) throws Exception {
        long id = cmd.path("ledger").asLong();
        boolean recovery = cmd.path("recovery").asBoolean(false);
        LedgerHandle lh = recovery ? bk.openLedger(id, digest(cmd), password(cmd))
                : bk.openLedgerNoRecovery(id, digest(cmd), password(cmd));
        try {
            long lac = lh.getLastAddConfirmed();
            long count = 0;
            long bytes = 0;
            ArrayNode bad = JSON.createArrayNode();
            for (long first = 0; first <= lac; first += 500) {
                long last = Math.min(lac, first + 499);
                Enumeration<LedgerEntry> entries = lh.readEntries(first, last);
                while (entries.hasMoreElements()) {
                    LedgerEntry e = entries.nextElement();
                    byte[] data = e.getEntry();
                    if (!java.util.Arrays.equals(data, payload(id, e.getEntryId(), data.length)) && bad.size() < 20) {
                        bad.add(e.getEntryId());
                    }
                    count++;
                    bytes += data.length;
                }
            }
            ObjectNode out = describe(lh);
            out.put("read", count);
            out.put("bytes", bytes);
            out.set("bad", bad);
            return out;
        } finally {
            lh.close();
        }
    }

    private ObjectNode lac(JsonNode cmd) throws Exception {
        LedgerHandle lh = bk.openLedgerNoRecovery(cmd.path("ledger").asLong(), digest(cmd), password(cmd));
        try {
            ObjectNode out = describe(lh);
            out.put("read_lac", lh.readLastAddConfirmed());
            return out;
        } finally {
            lh.close();
        }
    }

    private ObjectNode bulk(JsonNode cmd) throws Exception {
        int count = cmd.path("count").asInt(1);
        int entries = cmd.path("entries").asInt(1);
        int size = cmd.path("size").asInt(64);
        int openEvery = cmd.path("open_every").asInt(0);
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(64));
        Map<String, byte[]> md = metadata(cmd);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<CompletableFuture<Long>> done = new ArrayList<>();
        ArrayNode closed = JSON.createArrayNode();
        ArrayNode left = JSON.createArrayNode();
        boolean describe = cmd.path("describe").asBoolean(false);
        Map<Long, ObjectNode> described = new ConcurrentHashMap<>();
        for (int n = 0; n < count && failure.get() == null; n++) {
            boolean leaveOpen = openEvery > 0 && n % openEvery == openEvery - 1;
            inflight.acquire();
            CompletableFuture<Long> one = new CompletableFuture<>();
            bk.asyncCreateLedger(cmd.path("ensemble").asInt(3), cmd.path("wq").asInt(2), cmd.path("aq").asInt(2),
                    digest(cmd), password(cmd), (rc, lh, ctx) -> {
                        if (rc != BKException.Code.OK) {
                            one.completeExceptionally(BKException.create(rc));
                            return;
                        }
                        List<CompletableFuture<Long>> adds = new ArrayList<>();
                        for (int e = 0; e < entries; e++) {
                            adds.add(lh.appendAsync(payload(lh.getId(), e, size)));
                        }
                        CompletableFuture.allOf(adds.toArray(new CompletableFuture[0])).whenComplete((v, t) -> {
                            if (t != null) {
                                one.completeExceptionally(t);
                            } else if (leaveOpen) {
                                open.put(lh.getId(), lh);
                                if (describe) {
                                    described.put(lh.getId(), describe(lh));
                                }
                                one.complete(-lh.getId() - 1);
                            } else {
                                lh.closeAsync().whenComplete((v2, t2) -> {
                                    if (t2 != null) {
                                        one.completeExceptionally(t2);
                                    } else {
                                        if (describe) {
                                            described.put(lh.getId(), describe(lh));
                                        }
                                        one.complete(lh.getId());
                                    }
                                });
                            }
                        });
                    }, null, md);
            done.add(track(one, inflight, failure));
        }
        for (CompletableFuture<Long> f : done) {
            long v = f.get(600, TimeUnit.SECONDS);
            if (v < 0) {
                left.add(-v - 1);
            } else {
                closed.add(v);
            }
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("closed", closed);
        out.set("open", left);
        if (describe) {
            out.set("ledgers", array(described.values()));
        }
        return out;
    }

    /** `f`, giving its permit back to `inflight` when it completes and keeping the first failure. */
    private static <T> CompletableFuture<T> track(CompletableFuture<T> f, Semaphore inflight,
                                                 AtomicReference<Throwable> failure) {
        f.whenComplete((v, t) -> {
            inflight.release();
            if (t != null) {
                failure.compareAndSet(null, t);
            }
        });
        return f;
    }

    private static ArrayNode array(java.util.Collection<? extends JsonNode> nodes) {
        ArrayNode all = JSON.createArrayNode();
        nodes.forEach(all::add);
        return all;
    }

    private ObjectNode extend(JsonNode cmd) throws Exception {
        int entries = cmd.path("entries").asInt(1);
        int size = cmd.path("size").asInt(64);
        int keepEvery = cmd.path("keep_open_every").asInt(0);
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(64));
        List<LedgerHandle> handles = new ArrayList<>(open.values());
        handles.sort((a, b) -> Long.compare(a.getId(), b.getId()));
        Map<Long, ObjectNode> described = new ConcurrentHashMap<>();
        List<CompletableFuture<Void>> done = new ArrayList<>();
        for (int n = 0; n < handles.size(); n++) {
            LedgerHandle lh = handles.get(n);
            boolean keep = keepEvery > 0 && n % keepEvery == keepEvery - 1;
            inflight.acquire();
            List<CompletableFuture<Long>> adds = new ArrayList<>();
            long next = lh.getLastAddPushed() + 1;
            for (int e = 0; e < entries; e++) {
                adds.add(lh.appendAsync(payload(lh.getId(), next + e, size)));
            }
            CompletableFuture<Void> one = CompletableFuture.allOf(adds.toArray(new CompletableFuture[0]))
                    .thenCompose(v -> keep ? CompletableFuture.completedFuture((Void) null) : lh.closeAsync())
                    .thenRun(() -> {
                        if (!keep) {
                            open.remove(lh.getId());
                        }
                        described.put(lh.getId(), describe(lh));
                    });
            one.whenComplete((v, t) -> inflight.release());
            done.add(one);
        }
        for (CompletableFuture<Void> f : done) {
            f.get(600, TimeUnit.SECONDS);
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("ledgers", array(described.values()));
        return out;
    }

    private ObjectNode loadAdd(JsonNode cmd) throws Exception {
        int count = cmd.path("ledgers").asInt(1);
        int entries = cmd.path("entries").asInt(1);
        int size = cmd.path("size").asInt(1024);
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(1000));
        List<LedgerHandle> handles = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            handles.add(bk.createLedger(cmd.path("ensemble").asInt(3), cmd.path("wq").asInt(3),
                    cmd.path("aq").asInt(2), digest(cmd), password(cmd)));
        }
        byte[][] bodies = new byte[count][];
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<CompletableFuture<Long>> done = new ArrayList<>(count * entries);
        long t0 = System.nanoTime();
        for (int e = 0; e < entries && failure.get() == null; e++) {
            for (int i = 0; i < count; i++) {
                LedgerHandle lh = handles.get(i);
                inflight.acquire();
                done.add(track(lh.appendAsync(payload(lh.getId(), e, size)), inflight, failure));
            }
        }
        for (CompletableFuture<Long> f : done) {
            f.get(600, TimeUnit.SECONDS);
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        ArrayNode ids = JSON.createArrayNode();
        for (LedgerHandle lh : handles) {
            lh.close();
            ids.add(lh.getId());
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("ledgers", ids);
        out.put("ops", done.size());
        out.put("seconds", seconds);
        return out;
    }

    private ObjectNode loadRead(JsonNode cmd) throws Exception {
        int batch = cmd.path("batch").asInt(100);
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(16));
        List<LedgerHandle> handles = new ArrayList<>();
        for (JsonNode id : cmd.path("ledgers")) {
            handles.add(bk.openLedgerNoRecovery(id.asLong(), digest(cmd), password(cmd)));
        }
        java.util.concurrent.atomic.AtomicLong read = new java.util.concurrent.atomic.AtomicLong();
        List<CompletableFuture<?>> done = new ArrayList<>();
        long t0 = System.nanoTime();
        for (LedgerHandle lh : handles) {
            for (long first = 0; first <= lh.getLastAddConfirmed(); first += batch) {
                long last = Math.min(lh.getLastAddConfirmed(), first + batch - 1);
                inflight.acquire();
                CompletableFuture<?> one = lh.readAsync(first, last).whenComplete((entries, t) -> {
                    inflight.release();
                    if (entries != null) {
                        for (org.apache.bookkeeper.client.api.LedgerEntry e : entries) {
                            read.incrementAndGet();
                        }
                        entries.close();
                    }
                });
                done.add(one);
            }
        }
        for (CompletableFuture<?> f : done) {
            f.get(600, TimeUnit.SECONDS);
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        for (LedgerHandle lh : handles) {
            lh.close();
        }
        ObjectNode out = JSON.createObjectNode();
        out.put("ops", read.get());
        out.put("seconds", seconds);
        return out;
    }

    private ObjectNode loadList(JsonNode cmd) throws Exception {
        admin();
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(100));
        List<long[]> pairs = new ArrayList<>();
        List<BookieId> bookies = new ArrayList<>();
        for (JsonNode id : cmd.path("ledgers")) {
            long ledger = id.asLong();
            java.util.Set<BookieId> named =
                    new java.util.TreeSet<>(java.util.Comparator.comparing(BookieId::toString));
            bk.getLedgerManager().readLedgerMetadata(ledger).get().getValue().getAllEnsembles().values()
                    .forEach(named::addAll);
            for (BookieId b : named) {
                pairs.add(new long[] {ledger, bookies.size()});
                bookies.add(b);
            }
        }
        List<CompletableFuture<AvailabilityOfEntriesOfLedger>> done = new ArrayList<>();
        long t0 = System.nanoTime();
        for (long[] pair : pairs) {
            inflight.acquire();
            CompletableFuture<AvailabilityOfEntriesOfLedger> one =
                    admin.asyncGetListOfEntriesOfLedger(bookies.get((int) pair[1]), pair[0]);
            one.whenComplete((v, t) -> inflight.release());
            done.add(one);
        }
        for (CompletableFuture<AvailabilityOfEntriesOfLedger> f : done) {
            f.get(600, TimeUnit.SECONDS);
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        ObjectNode out = JSON.createObjectNode();
        out.put("ops", done.size());
        out.put("seconds", seconds);
        return out;
    }

    private synchronized org.apache.bookkeeper.proto.BookieClient bookieClient() throws Exception {
        if (bookieClient == null) {
            bookieClient = new org.apache.bookkeeper.proto.BookieClientImpl(conf,
                    new io.netty.channel.nio.NioEventLoopGroup(),
                    io.netty.buffer.UnpooledByteBufAllocator.DEFAULT,
                    org.apache.bookkeeper.common.util.OrderedExecutor.newBuilder().numThreads(1)
                            .name("BkDriverBookieClient").build(),
                    java.util.concurrent.Executors.newSingleThreadScheduledExecutor(),
                    org.apache.bookkeeper.stats.NullStatsLogger.INSTANCE, admin().getBookieAddressResolver());
        }
        return bookieClient;
    }

    private ObjectNode readBookie(JsonNode cmd) throws Exception {
        BookieId bookie = BookieId.parse(cmd.path("bookie").asText());
        org.apache.bookkeeper.proto.BookieClient client = bookieClient();
        Semaphore inflight = new Semaphore(cmd.path("inflight").asInt(100));
        List<CompletableFuture<long[]>> done = new ArrayList<>();
        for (JsonNode read : cmd.path("reads")) {
            long ledger = read.get(0).asLong();
            long entry = read.get(1).asLong();
            inflight.acquire();
            CompletableFuture<long[]> one = new CompletableFuture<>();
            client.readEntry(bookie, ledger, entry, (rc, l, e, buffer, ctx) -> {
                inflight.release();
                one.complete(new long[] {ledger, entry, rc});
            }, null, org.apache.bookkeeper.proto.BookieProtocol.FLAG_NONE);
            done.add(one);
        }
        ArrayNode failed = JSON.createArrayNode();
        for (CompletableFuture<long[]> f : done) {
            long[] r = f.get(120, TimeUnit.SECONDS);
            if (r[2] != BKException.Code.OK) {
                ArrayNode one = JSON.createArrayNode();
                one.add(r[0]);
                one.add(r[1]);
                one.add(r[2]);
                failed.add(one);
            }
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("failed", failed);
        return out;
    }

    private ObjectNode urlist() throws Exception {
        synchronized (this) {
            if (underreplication == null) {
                underreplication = bk.getLedgerManagerFactory().newLedgerUnderreplicationManager();
            }
        }
        ObjectNode ledgers = JSON.createObjectNode();
        Iterator<UnderreplicatedLedger> it = underreplication.listLedgersToRereplicate(null);
        while (it.hasNext()) {
            UnderreplicatedLedger u = it.next();
            ArrayNode ids = JSON.createArrayNode();
            u.getReplicaList().forEach(ids::add);
            ledgers.set(String.valueOf(u.getLedgerId()), ids);
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("ledgers", ledgers);
        return out;
    }

    private synchronized BookKeeperAdmin admin() {
        if (admin == null) {
            admin = new BookKeeperAdmin(bk, conf);
        }
        return admin;
    }

    private ObjectNode check(JsonNode cmd) throws Exception {
        LedgerHandle lh = bk.openLedgerNoRecovery(cmd.path("ledger").asLong(), digest(cmd), password(cmd));
        try {
            CompletableFuture<Set<LedgerFragment>> found = new CompletableFuture<>();
            new LedgerChecker(bk).checkLedger(lh, (rc, fragments) -> {
                if (rc == BKException.Code.OK) {
                    found.complete(fragments);
                } else {
                    found.completeExceptionally(BKException.create(rc));
                }
            }, cmd.path("percentage").asLong(0));
            ArrayNode out = JSON.createArrayNode();
            for (LedgerFragment f : found.get(120, TimeUnit.SECONDS)) {
                ObjectNode one = JSON.createObjectNode();
                one.put("first", f.getFirstEntryId());
                one.put("last", f.getLastKnownEntryId());
                ArrayNode bookies = JSON.createArrayNode();
                f.getAddresses().forEach(b -> bookies.add(b.toString()));
                one.set("bookies", bookies);
                out.add(one);
            }
            ObjectNode answer = describe(lh);
            answer.set("fragments", out);
            return answer;
        } finally {
            lh.close();
        }
    }

    private ObjectNode auditor() throws Exception {
        BookieId current = admin().getCurrentAuditor();
        ObjectNode out = JSON.createObjectNode();
        if (current == null) {
            out.putNull("auditor");
        } else {
            out.put("auditor", current.toString());
        }
        return out;
    }

    private ObjectNode list(JsonNode cmd) throws Exception {
        admin();
        ObjectNode out = JSON.createObjectNode();
        try {
            AvailabilityOfEntriesOfLedger av = admin.asyncGetListOfEntriesOfLedger(
                    BookieId.parse(cmd.path("bookie").asText()), cmd.path("ledger").asLong())
                    .get(cmd.path("timeout_ms").asLong(10000), TimeUnit.MILLISECONDS);
            ArrayNode ids = JSON.createArrayNode();
            long upto = cmd.path("upto").asLong(10000);
            for (long e = 0; e <= upto; e++) {
                if (av.isEntryAvailable(e)) {
                    ids.add(e);
                }
            }
            out.put("answer", "entries");
            out.put("total", av.getTotalNumOfAvailableEntries());
            out.set("entries", ids);
        } catch (java.util.concurrent.TimeoutException e) {
            out.put("answer", "timeout");
        } catch (java.util.concurrent.ExecutionException e) {
            out.put("answer", "error");
            Throwable c = e.getCause();
            out.put("error", String.valueOf(c));
            out.put("code", c instanceof BKException ? ((BKException) c).getCode() : 0);
        }
        return out;
    }

    private ObjectNode queue(JsonNode cmd) throws Exception {
        synchronized (this) {
            if (underreplication == null) {
                underreplication = bk.getLedgerManagerFactory().newLedgerUnderreplicationManager();
            }
        }
        long ledger = cmd.path("ledger").asLong();
        ObjectNode out = JSON.createObjectNode();
        switch (cmd.path("op").asText()) {
            case "urmark":
                List<String> replicas = new ArrayList<>();
                cmd.path("replicas").forEach(r -> replicas.add(r.asText()));
                underreplication.markLedgerUnderreplicatedAsync(ledger, replicas).get(30, TimeUnit.SECONDS);
                break;
            case "urlock":
                underreplication.acquireUnderreplicatedLedger(ledger);
                break;
            case "urrelease":
                underreplication.releaseUnderreplicatedLedger(ledger);
                break;
            default:
                UnderreplicatedLedger info = underreplication.getLedgerUnreplicationInfo(ledger);
                out.put("marked", info != null);
                if (info != null) {
                    ArrayNode ids = JSON.createArrayNode();
                    info.getReplicaList().forEach(ids::add);
                    out.set("replicas", ids);
                    out.put("ctime", info.getCtime());
                }
                String worker = underreplication.getReplicationWorkerIdRereplicatingLedger(ledger);
                if (worker == null) {
                    out.putNull("worker");
                } else {
                    out.put("worker", worker);
                }
        }
        out.put("ledger", ledger);
        return out;
    }

    private static ObjectNode describe(LedgerHandle lh) {
        ObjectNode out = JSON.createObjectNode();
        out.put("ledger", lh.getId());
        out.put("lac", lh.getLastAddConfirmed());
        out.put("closed", lh.isClosed());
        out.put("length", lh.getLength());
        ObjectNode ensembles = JSON.createObjectNode();
        NavigableMap<Long, ? extends List<BookieId>> all = lh.getLedgerMetadata().getAllEnsembles();
        for (Map.Entry<Long, ? extends List<BookieId>> e : all.entrySet()) {
            ArrayNode ids = JSON.createArrayNode();
            e.getValue().forEach(b -> ids.add(b.toString()));
            ensembles.set(String.valueOf(e.getKey()), ids);
        }
        out.set("ensembles", ensembles);
        return out;
    }

    // -- damage ------------------------------------------------------------------------------------------------

    private static void damage(Map<String, List<String>> opts) throws Exception {
        String storage = one(opts, "storage");
        File dir = new File(one(opts, "ledger-dir"));
        // ledger -> entries to lose; null: forget the whole ledger
        Map<Long, List<Long>> plan = new java.util.LinkedHashMap<>();
        if (opts.containsKey("plan")) {
            for (String line : java.nio.file.Files.readAllLines(new File(one(opts, "plan")).toPath())) {
                String[] parts = line.trim().split("\\s+");
                if (parts.length != 2) {
                    continue;
                }
                plan.put(Long.parseLong(parts[0]), parts[1].equals("forget") ? null : ids(parts[1]));
            }
        } else {
            List<Long> entries = new ArrayList<>();
            for (String s : opts.getOrDefault("entries", List.of())) {
                entries.addAll(ids(s));
            }
            plan.put(Long.parseLong(one(opts, "ledger")), opts.containsKey("forget") ? null : entries);
        }
        if (storage.equals("db")) {
            damageDb(dir, plan);
        } else if (storage.equals("interleaved") || storage.equals("sorted")) {
            for (Map.Entry<Long, List<Long>> e : plan.entrySet()) {
                damageIndex(dir, e.getKey(), e.getValue() == null ? List.of() : e.getValue(), e.getValue() == null);
            }
        } else {
            throw new IllegalArgumentException("storage must be db or interleaved, not " + storage);
        }
        System.out.println("{\"ok\":true}");
    }

    private static List<Long> ids(String csv) {
        List<Long> out = new ArrayList<>();
        for (String p : csv.split(",")) {
            if (!p.isBlank()) {
                out.add(Long.parseLong(p.trim()));
            }
        }
        return out;
    }

    private static byte[] longs(long... values) {
        ByteBuffer b = ByteBuffer.allocate(8 * values.length);
        for (long v : values) {
            b.putLong(v);
        }
        return b.array();
    }

    private static void damageDb(File dir, Map<Long, List<Long>> plan) throws Exception {
        ServerConfiguration conf = new ServerConfiguration();
        KeyValueStorage locations = new KeyValueStorageRocksDB(dir.getPath(), "locations",
                DbConfigType.EntryLocation, conf);
        try {
            for (Map.Entry<Long, List<Long>> one : plan.entrySet()) {
                forgetOrLose(locations, one.getKey(), one.getValue() == null ? List.of() : one.getValue(),
                        one.getValue() == null);
            }
            locations.sync();
        } finally {
            locations.close();
        }
        if (plan.containsValue(null)) {
            KeyValueStorage ledgers = new KeyValueStorageRocksDB(dir.getPath(), "ledgers",
                    DbConfigType.LedgerMetadata, conf);
            try {
                for (Map.Entry<Long, List<Long>> one : plan.entrySet()) {
                    if (one.getValue() == null) {
                        ledgers.delete(longs(one.getKey()));
                    }
                }
                ledgers.sync();
            } finally {
                ledgers.close();
            }
        }
    }

    private static void forgetOrLose(KeyValueStorage locations, long ledger, List<Long> entries, boolean forget)
            throws Exception {
        if (forget) {
            List<byte[]> keys = new ArrayList<>();
            try (KeyValueStorage.CloseableIterator<byte[]> it =
                    locations.keys(longs(ledger, 0), longs(ledger, Long.MAX_VALUE))) {
                while (it.hasNext()) {
                    keys.add(it.next());
                }
            }
            for (byte[] key : keys) {
                locations.delete(key);
            }
        }
        for (long e : entries) {
            if (locations.get(longs(ledger, e)) == null) {
                throw new IllegalStateException("entry " + ledger + ":" + e + " is not in the index");
            }
            locations.delete(longs(ledger, e));
        }
    }

    private static void damageIndex(File dir, long ledger, List<Long> entries, boolean forget) throws Exception {
        String name = Integer.toHexString((int) ((ledger & 0xff00) >> 8)) + "/"
                + Integer.toHexString((int) (ledger & 0xff)) + "/" + Long.toHexString(ledger) + ".idx";
        File index = new File(dir, name);
        if (!index.exists()) {
            throw new IllegalStateException("no index file " + index);
        }
        if (forget) {
            if (!index.delete()) {
                throw new IllegalStateException("could not delete " + index);
            }
            return;
        }
        try (RandomAccessFile f = new RandomAccessFile(index, "rw")) {
            for (long e : entries) {
                long at = 1024 + 8 * e;
                if (at + 8 > f.length()) {
                    throw new IllegalStateException("entry " + e + " is past the end of " + index);
                }
                f.seek(at);
                if (f.readLong() == 0) {
                    throw new IllegalStateException("entry " + ledger + ":" + e + " is not in " + index);
                }
                f.seek(at);
                f.writeLong(0);
            }
            f.getFD().sync();
        }
    }

    // -- BookKeeper's Auditor alone ------------------------------------------------------------------------------

    private static void auditorMode(Map<String, List<String>> opts) throws Exception {
        ServerConfiguration conf = new ServerConfiguration();
        conf.loadConf(new File(one(opts, "conf")).toURI().toURL());
        org.apache.bookkeeper.replication.Auditor auditor = new org.apache.bookkeeper.replication.Auditor(
                one(opts, "id"), conf, org.apache.bookkeeper.stats.NullStatsLogger.INSTANCE);
        auditor.start();
        System.out.println("{\"ok\":true,\"ready\":true}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // the Auditor runs on its own executor; a line changes nothing, end of input stops it
        }
        auditor.shutdown();
        System.exit(0);
    }

    // -- arguments ---------------------------------------------------------------------------------------------

    private static Map<String, List<String>> parse(String[] args) {
        Map<String, List<String>> opts = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + args[i]);
            }
            String key = args[i].substring(2);
            String value = i + 1 < args.length && !args[i + 1].startsWith("--") ? args[++i] : "";
            opts.computeIfAbsent(key, k -> new ArrayList<>()).add(value);
        }
        return opts;
    }

    private static String one(Map<String, List<String>> opts, String key) {
        List<String> v = opts.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return v.get(0);
    }
}
