package dev.molens.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.Before;
import org.junit.Test;

/** Namespaces and API keys against MOLENS_KEYED_NODE_URL, whose bootstrap admin key is MOLENS_ADMIN_TOKEN. */
public class TenancyTest {
    String base;
    MolensClient admin;

    @Before
    public void setUp() {
        base = NodeEnv.require("MOLENS_KEYED_NODE_URL");
        admin = MolensClient.builder(base).token(NodeEnv.require("MOLENS_ADMIN_TOKEN")).backoffMs(10, 200).build();
    }

    TaskRequest far() {
        return new TaskRequest().setType("delayed").setIntervalMs(3600000L).setCallbackUrl(base + "/api/v1/test/callback");
    }

    static String unique(String prefix) { return prefix + "-" + System.nanoTime(); }

    static Set<String> ids(List<Task> tasks) {
        Set<String> out = new HashSet<String>();
        for (Task t : tasks) {
            out.add(t.id);
        }
        return out;
    }

    @Test
    public void anAdminMakesANamespaceAndAWriterKeyThatCreatesAndListsInIt() {
        final String ns = unique("java-pay");
        Tenancy.Namespace made = admin.createNamespace(ns, new Tenancy.Quotas().setMaxPendingTasks(100L).setFiresPerS(5.0));
        assertEquals(ns, made.name);
        assertEquals(Long.valueOf(100), made.quotas.maxPendingTasks);
        assertEquals(Double.valueOf(5.0), made.quotas.firesPerS);
        // quotas are replaced whole: a change made from the namespace's own keeps the others, fires_per_s included
        Tenancy.Namespace updated = admin.updateNamespace(ns, admin.getNamespace(ns).quotas.setMaxPendingTasks(50L));
        assertEquals(Long.valueOf(50), updated.quotas.maxPendingTasks);
        assertEquals(Double.valueOf(5.0), updated.quotas.firesPerS);
        assertEquals(Double.valueOf(5.0), admin.getNamespace(ns).quotas.firesPerS);
        List<Tenancy.Namespace> all = admin.listNamespaces();
        assertEquals("default", all.get(0).name);
        assertEquals(ns, admin.getNamespace(ns).name);

        final Tenancy.ApiKey key = admin.createApiKey("java-ci", Tenancy.Role.WRITER, Collections.singletonList(ns));
        assertNotNull(key.secret);
        assertEquals(Tenancy.Role.WRITER, key.role);
        assertEquals(Collections.singletonList(ns), key.namespaces);
        assertNull("a key is shown without its secret", admin.getApiKey(key.id).secret);
        boolean listed = false;
        for (Tenancy.ApiKey k : admin.listApiKeys()) {
            assertNull(k.secret);
            listed |= k.id.equals(key.id);
        }
        assertTrue(listed);
        final Task other = admin.create(far());
        assertEquals("default", other.namespace);

        final MolensClient w = MolensClient.builder(base).token(key.secret).namespace(ns).backoffMs(10, 200).build();
        Task one = w.create(far());
        assertEquals(ns, one.namespace);
        List<Task> two = w.createAll(Arrays.asList(far(), far()));
        assertEquals(ns, two.get(0).namespace);
        assertEquals(ns, two.get(1).namespace);
        Set<String> mine = new HashSet<String>(ids(two));
        mine.add(one.id);
        assertEquals(mine, ids(w.listAllTasks(new ListOptions())));
        MolensClientTest.thrown(ForbiddenException.class, () -> w.create(far().setNamespace("default")), "forbidden", null);
        MolensClientTest.thrown(ForbiddenException.class, () -> w.listTasks(new ListOptions().setNamespace("default")),
                "forbidden", null);
        MolensClientTest.thrown(NotFoundException.class, () -> w.get(other.id), "not_found", "task_id");
        MolensClientTest.thrown(ForbiddenException.class, w::listApiKeys, "forbidden", null);

        assertEquals(mine, ids(admin.listAllTasks(new ListOptions().setNamespace(ns))));
        MolensClientTest.thrown(ConflictException.class, () -> admin.deleteNamespace(ns), "conflict", "name");
        admin.deleteApiKey(key.id);
        ApiException revoked = MolensClientTest.apiError(() -> w.get(one.id), 401, "unauthorized", null);
        assertTrue(revoked.isUnauthorized());
        // a write's 401 is a refusal, not a lost answer (HttpURLConnection drops its body)
        MolensClientTest.apiError(() -> w.pause(one.id), 401, "unauthorized", null);
        MolensClientTest.apiError(() -> w.create(far()), 401, "unauthorized", null);
    }

    @Test
    public void aReadersWriteIsForbiddenAndAQuotaIsQuotaExceeded() {
        final String ns = unique("java-tight");
        admin.createNamespace(ns, new Tenancy.Quotas().setMaxPendingTasks(1L));
        Tenancy.ApiKey key = admin.createApiKey("java-dash", Tenancy.Role.READER, Collections.singletonList(ns));
        final MolensClient r = MolensClient.builder(base).token(key.secret).namespace(ns).backoffMs(10, 200).build();
        ForbiddenException refused = MolensClientTest.thrown(ForbiddenException.class, () -> r.create(far()), "forbidden", null);
        assertTrue(refused.isForbidden());
        assertTrue(r.listAllTasks(new ListOptions()).isEmpty());
        Task first = admin.create(far().setNamespace(ns));
        assertEquals(ns, first.namespace);
        QuotaExceededException over = MolensClientTest.thrown(QuotaExceededException.class,
                () -> admin.createAll(Collections.singletonList(far().setNamespace(ns))), "quota_exceeded", "max_pending_tasks");
        assertEquals(429, over.getStatus());
        assertEquals("max_pending_tasks", over.getQuota());
        assertNotNull(over.getRetryAfterSeconds());
        assertTrue(over.getRetryAfterSeconds() >= 1);
        assertEquals(Collections.singleton(first.id), ids(admin.listAllTasks(new ListOptions().setNamespace(ns))));
    }

    @Test(expected = IllegalArgumentException.class)
    public void aBadNamespaceIsRefusedBeforeAnyRequest() {
        MolensClient.builder("http://127.0.0.1:9").namespace("Not Valid").build();
    }
}
