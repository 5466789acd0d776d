package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.KeyEnforcement;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Decides from what UCX says ({@link UcxInfo}) whether a withdrawn remote key is refused by the NIC: the memserver's
 * context registers with an InfiniBand/RoCE memory domain that gives each registration its own memory region
 * ({@link #context}), and a client's GETs and PUTs travel on RDMA lanes whose remote memory domain is that one
 * ({@link #endpoint}). Anything else (RMA emulated over active messages, shared memory, cma, tcp, a registration
 * cache or a global ODP key) checks no key that a deregistration withdraws. When unsure it says no: keeping memory
 * mapped for a grace period costs time, dropping it under a client that can still write costs data.
 */
final class UcxKeyCheck {
    private UcxKeyCheck() {}

    /** UCX transports that do one-sided RDMA READ/WRITE on the NIC, checking the rkey. */
    private static final Set<String> RDMA_RMA_TLS = Set.of("rc_verbs", "rc_mlx5", "dc_mlx5", "rc", "rc_x", "dc",
            "dc_x");
    /** The name of UCX's InfiniBand/RoCE component (its memory domains register with ibv_reg_mr). */
    static final String IB_COMPONENT = "ib";

    private static final Pattern COMPONENT = Pattern.compile("^#\\s+component\\s+(\\d+)\\s+:\\s+(\\S+)\\s*$");
    private static final Pattern MD = Pattern.compile("^#\\s+md\\s+(\\d+)\\s+:\\s+component\\s+(\\d+)\\s+(\\S+)");
    private static final Pattern RESOURCE = Pattern.compile(
            "^#\\s+resource\\s+\\d+\\s+:\\s+md\\s+(\\d+)\\s+dev\\s+\\d+\\s+flags\\s+\\S+\\s+([^/\\s]+)/(\\S+)");
    /** "lane[1]:  3:rc_verbs/rxe0:1.0 md[2]   -> md[2]/ib/sysdev[255] rma_bw#0 am" (not a cm lane). */
    private static final Pattern LANE = Pattern.compile(
            "lane\\[(\\d+)\\]:\\s+\\d+:([^/\\s]+)/(\\S+)\\.\\d+\\s+md\\[\\d+\\]\\s+->\\s+(?:addr\\[\\d+\\]\\.)?"
                    + "md\\[\\d+\\]/([^/\\s]+)/\\S*(.*)$");
    /** "put[1]: 0 ..." and "get[1]: 0 ...": the GET/PUT protocol of RMA lane 1. */
    private static final Pattern RMA_LANE = Pattern.compile("^#\\s+(?:put|get)\\[(\\d+)\\]:");

    /**
     * The memserver's context: enforced when it opened an IB memory domain with an RDMA transport on it and that
     * domain registers each region on its own ({@code regMethods}, the effective UCX_IB_REG_METHODS as UCX reads it,
     * null without an IB component).
     *
     * @param contextInfo what {@code ucp_context_print_info} printed
     */
    static KeyEnforcement context(String contextInfo, List<String> regMethods) {
        Map<Integer, String> components = new HashMap<>();
        Map<Integer, Integer> mdComponent = new HashMap<>();
        Map<Integer, String> mdName = new HashMap<>();
        Set<String> transports = new LinkedHashSet<>();
        Set<String> rdmaDevices = new TreeSet<>();
        List<String[]> resources = new ArrayList<>();
        for (String line : contextInfo.split("\n")) {
            Matcher m;
            if ((m = COMPONENT.matcher(line)).find()) {
                components.put(Integer.parseInt(m.group(1)), m.group(2));
            } else if ((m = MD.matcher(line)).find()) {
                mdComponent.put(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)));
                mdName.put(Integer.parseInt(m.group(1)), m.group(3));
            } else if ((m = RESOURCE.matcher(line)).find()) {
                resources.add(new String[]{m.group(1), m.group(2), m.group(3)});
                transports.add(m.group(2) + "/" + m.group(3));
            }
        }
        for (String[] r : resources) {
            int md = Integer.parseInt(r[0]);
            if (IB_COMPONENT.equals(components.get(mdComponent.get(md))) && RDMA_RMA_TLS.contains(r[1])) {
                rdmaDevices.add(mdName.get(md));
            }
        }
        if (rdmaDevices.isEmpty()) {
            return new KeyEnforcement(false, "UCX opened no InfiniBand/RoCE memory domain with an RDMA transport here "
                    + "(transports in use: " + (transports.isEmpty() ? "none listed" : String.join(", ", transports))
                    + "): GET and PUT are emulated or go over shared memory, cma or tcp, which check no remote key");
        }
        String method = regMethod(regMethods);
        if (!"direct".equals(method)) {
            return new KeyEnforcement(false, "UCX_IB_REG_METHODS=" + String.join(",", regMethods == null ? List.of()
                    : regMethods) + " makes UCX register with "
                    + (method == null ? "no method it knows"
                            : method.equals("rcache")
                                    ? "a registration cache, which keeps a deregistered region and its "
                                            + "remote key alive"
                                    : "one on-demand-paging key for all memory")
                    + " (devices "
                    + String.join(", ", rdmaDevices) + "); only 'direct' gives each registration its own key");
        }
        return new KeyEnforcement(true, "regions are registered with " + String.join(", ", rdmaDevices)
                + " one memory region each (UCX_IB_REG_METHODS=direct): the NIC refuses a withdrawn remote key");
    }

    /**
     * The registration method UCX's IB memory domain uses with this list: the first entry it recognises, compared
     * as UCX 1.13 does ("rcache" and "odp" in any case, "direct" exactly), or null when none is (UCX then does not
     * open the domain). An "odp" entry counts although UCX skips it on a NIC without implicit ODP: unsure means no.
     */
    static String regMethod(List<String> regMethods) {
        if (regMethods == null) {
            return null;
        }
        for (String m : regMethods) {
            if (m.equalsIgnoreCase("rcache") || m.equalsIgnoreCase("odp")) {
                return m.toLowerCase(Locale.ROOT);
            }
            if (m.equals("direct")) {
                return m;
            }
        }
        return null;
    }

    /**
     * An endpoint to a client (the memserver's own, which UCX pairs with the client's and selects from the same
     * transports): enforced when it has RMA lanes (else UCX emulates GET and PUT over active messages) and every RMA
     * lane, and every lane UCX may use for bulk RMA, is an RDMA transport whose remote memory domain is an IB one.
     *
     * @param endpointInfo what {@code ucp_ep_print_info} printed
     */
    static KeyEnforcement endpoint(String endpointInfo) {
        Map<Integer, String[]> lanes = new HashMap<>();
        Set<Integer> rma = new TreeSet<>();
        for (String line : endpointInfo.split("\n")) {
            Matcher m;
            if ((m = LANE.matcher(line)).find()) {
                lanes.put(Integer.parseInt(m.group(1)), new String[]{m.group(2), m.group(3), m.group(4),
                        m.group(5)});
                if (m.group(5).contains(" rma_bw#")) {
                    rma.add(Integer.parseInt(m.group(1)));
                }
            } else if ((m = RMA_LANE.matcher(line)).find()) {
                rma.add(Integer.parseInt(m.group(1)));
            }
        }
        if (lanes.isEmpty()) {
            return new KeyEnforcement(false, "UCX listed no lanes for the endpoint");
        }
        if (endpointInfo.lines().noneMatch(l -> RMA_LANE.matcher(l).find())) {
            return new KeyEnforcement(false, "UCX emulates GET and PUT over active messages on this endpoint (lanes: "
                    + describe(lanes, lanes.keySet()) + "), which check no remote key");
        }
        List<Integer> unchecked = new ArrayList<>();
        for (int lane : rma) {
            String[] l = lanes.get(lane);
            if (l == null || !RDMA_RMA_TLS.contains(l[0]) || !IB_COMPONENT.equals(l[2])) {
                unchecked.add(lane);
            }
        }
        if (!unchecked.isEmpty()) {
            return new KeyEnforcement(false, "GET and PUT may go over " + describe(lanes, unchecked)
                    + " on this endpoint, which check no remote key the memserver withdraws");
        }
        return new KeyEnforcement(true, "GET and PUT go over " + describe(lanes, rma) + " (RDMA; the NIC checks "
                + "the remote key)");
    }

    private static String describe(Map<Integer, String[]> lanes, Iterable<Integer> which) {
        Set<String> out = new LinkedHashSet<>();
        for (int lane : which) {
            String[] l = lanes.get(lane);
            out.add(l == null ? "lane " + lane : l[0] + "/" + l[1]);
        }
        return String.join(", ", out);
    }
}
