set terminal pngcairo size 1000,560 noenhanced font "sans,10"
set output "bench/results/budget_conv_vgg16_20261127/budget_curve.png"
set logscale x
set xlabel "peak resident weights + activations (MiB, sampled)"
set ylabel "latency, budgeted / unbudgeted (planned copy, same run)"
set key outside right top
set grid
set yrange [0.9:*]
plot "bench/results/budget_conv_vgg16_20261127/curve_vgg16_warm.dat" using 1:2 with linespoints lc rgb '#1b6ac9' dt 1 pt 7 title "vgg16, warm page cache", "bench/results/budget_conv_vgg16_20261127/curve_vgg16_warm.dat" using 1:2:(sprintf("%g%%", $3)) with labels offset 0,0.8 font "sans,8" notitle, "bench/results/budget_conv_vgg16_20261127/curve_vgg16_cold.dat" using 1:2 with linespoints lc rgb '#1b6ac9' dt 2 pt 7 title "vgg16, cold page cache", "bench/results/budget_conv_vgg16_20261127/curve_vgg16_cold.dat" using 1:2:(sprintf("%g%%", $3)) with labels offset 0,0.8 font "sans,8" notitle
