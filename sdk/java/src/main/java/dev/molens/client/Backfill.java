package dev.molens.client;

/**
 * The answer of {@link MolensClient#backfill}: how many occurrences the backfill fires, the first and
 * last one's instants (epoch ms; null when none), and the task after the request.
 */
public final class Backfill {
    public int occurrences;
    public Long first;
    public Long last;
    public Task task;
}
